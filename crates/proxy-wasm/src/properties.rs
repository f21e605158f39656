//! `proxy_get_property`: values set with `proxy_set_property` (or by the
//! embedder), the plugin's own names, request/response attributes derived
//! from the header maps, and connection facts from [`crate::exchange::RequestInfo`].
//!
//! Numbers are 8-byte little-endian integers and booleans one byte, as Envoy
//! serializes them.

use std::net::SocketAddr;
use std::time::UNIX_EPOCH;

use wasmgate_base::hex;

use crate::headers::Headers;
use crate::pairs;
use crate::state::FilterState;

pub(crate) fn get(state: &FilterState, path: &[u8]) -> Option<Vec<u8>> {
    let path = path.strip_suffix(&[0]).unwrap_or(path);
    if let Some(value) = state.exchange.properties.get(path) {
        return Some(value.clone());
    }
    let exchange = &state.exchange;
    let info = &exchange.info;
    let plugin = &state.plugin;
    let request = |name: &[u8]| exchange.request_headers.get(name).map(<[u8]>::to_vec);
    match pairs::property_path(path).as_slice() {
        [b"plugin_name"] => Some(plugin.config.name.as_bytes().to_vec()),
        [b"plugin_root_id"] => Some(plugin.config.root_id.as_bytes().to_vec()),
        [b"plugin_vm_id"] => Some(plugin.config.vm_id.as_bytes().to_vec()),
        // Higress's: the instance's linear memory, read by its framework to
        // decide when to ask for a rebuild (`wasm_need_rebuild`).
        [b"plugin_vm_memory"] => Some(integer(state.limiter.committed_bytes() as i64)),
        [b"route_name"] => Some(plugin.config.route.as_bytes().to_vec()),
        [b"cluster_name"] => info.cluster.as_ref().map(|c| c.as_bytes().to_vec()),
        [b"request", b"headers", name] => request(name),
        [b"request", b"path"] => request(b":path"),
        [b"request", b"url_path"] => {
            request(b":path").map(|p| p.split(|&b| b == b'?').next().unwrap_or_default().to_vec())
        }
        [b"request", b"query"] => request(b":path").map(|p| {
            p.iter()
                .position(|&b| b == b'?')
                .map_or_else(Vec::new, |i| p[i + 1..].to_vec())
        }),
        [b"request", b"method"] => request(b":method"),
        [b"request", b"host"] => request(b":authority"),
        [b"request", b"scheme"] => request(b":scheme"),
        [b"request", b"id"] => Some(format!("{:016x}", info.id).into_bytes()),
        [b"request", b"protocol"] => Some(info.protocol.as_bytes().to_vec()),
        [b"request", b"trace_id"] => info
            .trace
            .as_ref()
            .map(|t| hex::encode(&t.trace_id).into_bytes()),
        [b"request", b"span_id"] => info
            .trace
            .as_ref()
            .map(|t| hex::encode(&t.span_id).into_bytes()),
        [b"request", b"time"] => info.start_time.map(|t| {
            let nanos = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
            integer(nanos as i64)
        }),
        [b"request", b"size"] => content_length(&exchange.request_headers),
        [b"response", b"headers", name] => exchange.response_headers.get(name).map(<[u8]>::to_vec),
        [b"response", b"code"] => exchange
            .response_headers
            .get(b":status")
            .and_then(|s| std::str::from_utf8(s).ok()?.parse::<i64>().ok())
            .map(integer),
        [b"response", b"size"] => content_length(&exchange.response_headers),
        [b"response", b"code_details"] => exchange
            .response_details
            .as_ref()
            .map(|d| d.as_bytes().to_vec()),
        [b"source", field] => address(info.source, field),
        [b"destination", field] => address(info.destination, field),
        [b"connection", b"id"] => Some(integer(info.connection_id as i64)),
        [b"connection", field] => connection(info.tls.as_deref(), field),
        _ => None,
    }
}

/// `connection.*` of TLS: empty (and `mtls` false) on a plain connection.
fn connection(tls: Option<&crate::exchange::TlsInfo>, field: &[u8]) -> Option<Vec<u8>> {
    let text = |value: Option<&str>| Some(value.unwrap_or_default().as_bytes().to_vec());
    let first = |list: Option<&Vec<String>>| text(list.and_then(|l| l.first()).map(String::as_str));
    match field {
        b"mtls" => Some(vec![u8::from(
            tls.is_some_and(|t| t.peer_subject.is_some()),
        )]),
        b"tls_version" => text(tls.map(|t| t.version)),
        b"requested_server_name" => text(tls.and_then(|t| t.sni.as_deref())),
        b"subject_peer_certificate" => text(tls.and_then(|t| t.peer_subject.as_deref())),
        b"uri_san_peer_certificate" => first(tls.map(|t| &t.peer_uri_sans)),
        b"dns_san_peer_certificate" => first(tls.map(|t| &t.peer_dns_sans)),
        _ => None,
    }
}

fn integer(value: i64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

fn content_length(headers: &Headers) -> Option<Vec<u8>> {
    let value = headers.get(b"content-length")?;
    let length = std::str::from_utf8(value)
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()?;
    Some(integer(length))
}

fn address(address: Option<SocketAddr>, field: &[u8]) -> Option<Vec<u8>> {
    let address = address?;
    match field {
        b"address" => Some(address.to_string().into_bytes()),
        b"port" => Some(integer(i64::from(address.port()))),
        _ => None,
    }
}
