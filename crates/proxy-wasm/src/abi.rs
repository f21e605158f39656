//! The numbers of the Proxy-Wasm ABI: status codes, enums and the version
//! markers a module exports. Values are the spec's (and the SDKs'): the Rust
//! SDK panics on a status it does not expect, so each host function returns
//! exactly the statuses its SDK wrapper handles.

/// Result of a host function, as the guest reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    NotFound = 1,
    BadArgument = 2,
    SerializationFailure = 3,
    ParseFailure = 4,
    Empty = 7,
    CasMismatch = 8,
    InternalFailure = 10,
    Unimplemented = 12,
}

/// What a stream callback asks of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Stop here until `proxy_continue_stream` (or a local response).
    Pause,
}

impl Action {
    /// 0 is Continue; 1 (Pause) and the older StopIteration* codes all stop.
    pub fn from_code(code: i32) -> Action {
        if code == 0 {
            Action::Continue
        } else {
            Action::Pause
        }
    }
}

/// A headers callback's `StopIteration` (1): what Higress's hosts honour
/// as such for modules of [`AbiVersion::V0_2_100`] (the body goes on to
/// the filter while its headers wait). Stock Envoy turns it into
/// `StopAllIterationAndWatermark` for every other module, as it does with
/// 3 and 4: nothing more reaches the filter until something resumes it.
pub const HEADERS_STOP_ITERATION: i32 = 1;

/// Which header map a host function works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    RequestHeaders,
    RequestTrailers,
    ResponseHeaders,
    ResponseTrailers,
    GrpcReceiveInitialMetadata,
    GrpcReceiveTrailingMetadata,
    HttpCallResponseHeaders,
    HttpCallResponseTrailers,
}

impl MapType {
    pub fn from_code(code: i32) -> Option<MapType> {
        Some(match code {
            0 => MapType::RequestHeaders,
            1 => MapType::RequestTrailers,
            2 => MapType::ResponseHeaders,
            3 => MapType::ResponseTrailers,
            // A gRPC stream's (unary calls do not show theirs; Envoy neither).
            4 => MapType::GrpcReceiveInitialMetadata,
            5 => MapType::GrpcReceiveTrailingMetadata,
            6 => MapType::HttpCallResponseHeaders,
            7 => MapType::HttpCallResponseTrailers,
            _ => return None,
        })
    }
}

/// Which byte buffer a host function works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferType {
    RequestBody,
    ResponseBody,
    HttpCallResponseBody,
    VmConfiguration,
    PluginConfiguration,
    /// The message `proxy_on_grpc_receive` is reading (a gRPC call's reply).
    GrpcReceiveBuffer,
    /// Higress: the reply `proxy_on_redis_call_response` is reading.
    RedisCallResponse,
}

impl BufferType {
    pub fn from_code(code: i32) -> Option<BufferType> {
        Some(match code {
            0 => BufferType::RequestBody,
            1 => BufferType::ResponseBody,
            // 2 and 3 are TCP stream data.
            4 => BufferType::HttpCallResponseBody,
            5 => BufferType::GrpcReceiveBuffer,
            6 => BufferType::VmConfiguration,
            7 => BufferType::PluginConfiguration,
            9 => BufferType::RedisCallResponse,
            _ => return None,
        })
    }
}

/// The request or the response half of an HTTP stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamType {
    Request,
    Response,
}

impl StreamType {
    pub fn from_code(code: i32) -> Option<StreamType> {
        match code {
            0 => Some(StreamType::Request),
            1 => Some(StreamType::Response),
            _ => None,
        }
    }
}

/// The ABI versions wasmgate speaks, told apart by the marker function a
/// module exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbiVersion {
    V0_1_0,
    V0_2_0,
    V0_2_1,
    /// Higress's extension of 0.2.1 (`proxy_abi_version_0_2_100`).
    V0_2_100,
    /// The unfinished next version's marker; treated as 0.2.1.
    Vnext,
}

impl AbiVersion {
    /// Whether a headers callback's [`HEADERS_STOP_ITERATION`] stops only
    /// the headers, as Higress's Envoy does for its modules.
    pub fn honours_stop_iteration(self) -> bool {
        self == AbiVersion::V0_2_100
    }

    pub const MARKERS: [(&'static str, AbiVersion); 5] = [
        ("proxy_abi_version_0_1_0", AbiVersion::V0_1_0),
        ("proxy_abi_version_0_2_0", AbiVersion::V0_2_0),
        ("proxy_abi_version_0_2_1", AbiVersion::V0_2_1),
        ("proxy_abi_version_0_2_100", AbiVersion::V0_2_100),
        ("proxy_abi_version_vnext", AbiVersion::Vnext),
    ];

    /// The version whose marker is among `exports`, if exactly one is.
    pub fn detect<'a>(exports: impl IntoIterator<Item = &'a str>) -> Result<AbiVersion, String> {
        let found: Vec<AbiVersion> = exports
            .into_iter()
            .filter_map(|name| {
                Self::MARKERS
                    .iter()
                    .find(|(marker, _)| *marker == name)
                    .map(|(_, v)| *v)
            })
            .collect();
        match found.as_slice() {
            [version] => Ok(*version),
            [] => Err("exports no proxy_abi_version_* marker: not a Proxy-Wasm module".into()),
            _ => Err(format!("exports several ABI version markers: {found:?}")),
        }
    }

    /// 0.1.0 resumes streams with `proxy_continue_request`/`_response`
    /// instead of `proxy_continue_stream`, and has no `proxy_on_done` result.
    pub fn is_v0_1(self) -> bool {
        self == AbiVersion::V0_1_0
    }
}

impl std::fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AbiVersion::V0_1_0 => "0.1.0",
            AbiVersion::V0_2_0 => "0.2.0",
            AbiVersion::V0_2_1 => "0.2.1",
            AbiVersion::V0_2_100 => "0.2.100",
            AbiVersion::Vnext => "vnext",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_exactly_one_marker() {
        assert_eq!(
            AbiVersion::detect(["memory", "proxy_abi_version_0_2_1", "malloc"]),
            Ok(AbiVersion::V0_2_1)
        );
        assert_eq!(
            AbiVersion::detect(["proxy_abi_version_0_2_100"]),
            Ok(AbiVersion::V0_2_100)
        );
        assert!(AbiVersion::detect(["_start"])
            .unwrap_err()
            .contains("not a Proxy-Wasm module"));
        assert!(
            AbiVersion::detect(["proxy_abi_version_0_1_0", "proxy_abi_version_0_2_0"]).is_err()
        );
    }

    #[test]
    fn codes_follow_the_spec() {
        assert_eq!(MapType::from_code(2), Some(MapType::ResponseHeaders));
        assert_eq!(
            MapType::from_code(5),
            Some(MapType::GrpcReceiveTrailingMetadata)
        );
        assert_eq!(MapType::from_code(8), None);
        assert_eq!(
            BufferType::from_code(5),
            Some(BufferType::GrpcReceiveBuffer)
        );
        assert_eq!(
            BufferType::from_code(7),
            Some(BufferType::PluginConfiguration)
        );
        assert_eq!(Action::from_code(1), Action::Pause);
        assert_eq!(Action::from_code(0), Action::Continue);
        assert_eq!(Status::Unimplemented as u32, 12);
    }
}
