//! Every Proxy-Wasm host function (import module `env`), for ABI 0.1.0 to
//! 0.2.1, and Higress's Redis extension (0.2.100, `redis_call.rs`). Pointers and lengths from the guest are checked: a bad one fails
//! the filter's callback with an error naming the function. Statuses are the
//! ones the SDKs expect for each function; what a call may make the host hold
//! is capped (`limits.rs`, which says which status each cap answers).

use std::time::{SystemTime, UNIX_EPOCH};

use wasmtime::{Caller, FuncType, Linker, Val, ValType};

use crate::abi::{BufferType, MapType, Status, StreamType};
use crate::callout::Callout;
use crate::exchange::LocalResponse;
use crate::grpc_call::{GrpcCallRequest, GrpcTarget};
use crate::grpc_stream::GrpcStreamRequest;
use crate::headers::Headers;
use crate::http_call::HttpCallRequest;
use crate::limits::{refuse, Limit};
use crate::pairs;
use crate::redis_call::{base_cluster, RedisCallRequest, RedisInit};
use crate::shared::{shared, MetricKind, Refused};
use crate::state::{give, give_then, read, with_guest_bytes, write, write_u32, FilterState};

pub const MODULE: &str = "env";
/// Where the functions that hand the guest a value are linked: the guest
/// reaches them through `giving.rs`'s module, which calls its allocator
/// after them; the guest itself may not import from here.
pub(crate) const GIVING_MODULE: &str = "wasmgate:giving";

type Ctx<'a> = Caller<'a, FilterState>;
type Result<T> = wasmtime::Result<T>;

const OK: i32 = Status::Ok as i32;
const NOT_FOUND: i32 = Status::NotFound as i32;
const BAD_ARGUMENT: i32 = Status::BadArgument as i32;

/// Counts and logs a call of `function` that `limit` refused; the guest
/// gets `status`.
fn refused(c: &Ctx, function: &'static str, limit: Limit, status: Status) -> i32 {
    refuse(&c.data().plugin, limit, function);
    status as i32
}

/// `InternalFailure` for a call beyond `calls_in_flight` (what Envoy answers
/// when it cannot start a call, and what the SDKs' call wrappers expect).
fn too_many_calls(c: &Ctx, function: &'static str) -> Option<i32> {
    (!c.data().may_call())
        .then(|| refused(c, function, Limit::CallsInFlight, Status::InternalFailure))
}

pub fn add_to_linker(linker: &mut Linker<FilterState>) -> Result<()> {
    add_logging_and_time(linker)?;
    add_buffers(linker)?;
    add_header_maps(linker)?;
    add_properties(linker)?;
    add_stream_control(linker)?;
    add_shared_data_and_queues(linker)?;
    add_metrics(linker)?;
    add_redis(linker)?;
    add_unimplemented(linker)?;
    add_giving_placeholders(linker)?;
    crate::giving::add_to_linker(linker)?;
    Ok(())
}

/// The giving functions (`giving.rs`) as `env` knows them: a filter imports
/// them from the giving module, never from here, but with these in place
/// the linker checks a module's imports of them (their signatures) like any
/// other, and they are not taken for unknown imports.
fn add_giving_placeholders(linker: &mut Linker<FilterState>) -> Result<()> {
    for &(name, i32s) in crate::giving::GIVING {
        let ty = FuncType::new(
            linker.engine(),
            std::iter::repeat_n(ValType::I32, i32s),
            [ValType::I32],
        );
        linker.func_new(MODULE, name, ty, move |_, _, _| {
            wasmtime::bail!("{name} was linked to the host instead of the giving module")
        })?;
    }
    Ok(())
}

/// Whether a guest log line at this Proxy-Wasm level would be written.
fn log_enabled(level: i32) -> bool {
    use tracing::Level;
    match level {
        0 => tracing::enabled!(target: "wasmgate::filter", Level::TRACE),
        1 => tracing::enabled!(target: "wasmgate::filter", Level::DEBUG),
        2 => tracing::enabled!(target: "wasmgate::filter", Level::INFO),
        3 => tracing::enabled!(target: "wasmgate::filter", Level::WARN),
        _ => tracing::enabled!(target: "wasmgate::filter", Level::ERROR),
    }
}

fn add_logging_and_time(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_log",
        |mut c: Ctx, level: i32, ptr: u32, len: u32| -> Result<i32> {
            // Filters log on every request whatever the host's level (the
            // Rust SDK never asks it): skip the copy when nobody listens.
            if !log_enabled(level) {
                return Ok(OK);
            }
            let message = read(&mut c, "proxy_log", ptr, len)?;
            let message = String::from_utf8_lossy(&message);
            let message = wasmgate_runtime::guest_log::escape(&message);
            let config = &c.data().plugin.config;
            let (plugin, route) = (&config.name, &config.route);
            match level {
                0 => tracing::trace!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                1 => tracing::debug!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                2 => tracing::info!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                3 => tracing::warn!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                _ => tracing::error!(target: "wasmgate::filter", %plugin, %route, "{message}"),
            }
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_log_level",
        |mut c: Ctx, out: u32| -> Result<i32> {
            write_u32(&mut c, "proxy_get_log_level", out, log_level_code())?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_current_time_nanoseconds",
        |mut c: Ctx, out: u32| -> Result<i32> {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            write(
                &mut c,
                "proxy_get_current_time_nanoseconds",
                out,
                &(now.as_nanos() as u64).to_le_bytes(),
            )?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_tick_period_milliseconds",
        |mut c: Ctx, period: u32| -> i32 {
            c.data_mut().tick_period_ms = period;
            OK
        },
    )?;
    Ok(())
}

/// The SDKs' level numbering; 5 (critical only) when logging is off.
fn log_level_code() -> u32 {
    wasmgate_runtime::log_level::current().unwrap_or(5)
}

/// The buffer `kind` names, when this context has it.
fn buffer(state: &mut FilterState, kind: BufferType) -> Option<&mut Vec<u8>> {
    match kind {
        BufferType::RequestBody => Some(&mut state.exchange.request_body),
        BufferType::ResponseBody => Some(&mut state.exchange.response_body),
        BufferType::HttpCallResponseBody => state.call_response.as_mut().map(|r| &mut r.body),
        BufferType::RedisCallResponse => state.redis_reply.as_mut(),
        BufferType::GrpcReceiveBuffer => state.grpc_reply.as_mut(),
        BufferType::VmConfiguration | BufferType::PluginConfiguration => None,
    }
}

fn add_buffers(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_buffer_bytes",
        |mut c: Ctx, kind: i32, start: u32, max: u32, ptr_out: u32, len_out: u32| -> Result<i32> {
            let Some(kind) = BufferType::from_code(kind) else {
                return Ok(BAD_ARGUMENT);
            };
            let state = c.data_mut();
            let bytes: &[u8] = match kind {
                BufferType::VmConfiguration => &state.plugin.config.vm_configuration,
                BufferType::PluginConfiguration => &state.plugin.config.plugin_configuration,
                other => match buffer(state, other) {
                    Some(bytes) => bytes,
                    None => return Ok(NOT_FOUND),
                },
            };
            let start = (start as usize).min(bytes.len());
            let end = start.saturating_add(max as usize).min(bytes.len());
            // Nothing to read: Ok, and nothing written, as Envoy's host
            // does. (The AssemblyScript SDK decodes whatever its out
            // pointer held before; written as 0 it traps.)
            if start == end {
                return Ok(OK);
            }
            let bytes = bytes[start..end].to_vec();
            give(&mut c, "proxy_get_buffer_bytes", bytes, ptr_out, len_out)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_buffer_bytes",
        |mut c: Ctx, kind: i32, start: u32, size: u32, ptr: u32, len: u32| -> Result<i32> {
            let data = read(&mut c, "proxy_set_buffer_bytes", ptr, len)?;
            let Some(target) = BufferType::from_code(kind).and_then(|k| buffer(c.data_mut(), k))
            else {
                return Ok(BAD_ARGUMENT);
            };
            // Replace bytes [start, start + size) with `data`, as the SDKs'
            // set_http_request_body(start, size, value) means.
            let start = (start as usize).min(target.len());
            let end = start.saturating_add(size as usize).min(target.len());
            target.splice(start..end, data);
            Ok(OK)
        },
    )?;
    Ok(())
}

fn map(state: &mut FilterState, kind: MapType) -> Option<&mut Headers> {
    let exchange = &mut state.exchange;
    match kind {
        MapType::RequestHeaders => Some(&mut exchange.request_headers),
        MapType::RequestTrailers => Some(&mut exchange.request_trailers),
        MapType::ResponseHeaders => Some(&mut exchange.response_headers),
        MapType::ResponseTrailers => Some(&mut exchange.response_trailers),
        MapType::GrpcReceiveInitialMetadata | MapType::GrpcReceiveTrailingMetadata => {
            match &mut state.grpc_metadata {
                Some((delivered, metadata)) if *delivered == kind => Some(metadata),
                _ => None,
            }
        }
        MapType::HttpCallResponseHeaders => state.call_response.as_mut().map(|r| &mut r.headers),
        MapType::HttpCallResponseTrailers => state.call_response.as_mut().map(|r| &mut r.trailers),
    }
}

/// Runs `edit` on the map `kind` names; BadArgument for maps this context
/// lacks.
fn edit_map(state: &mut FilterState, kind: i32, edit: impl FnOnce(&mut Headers)) -> i32 {
    let Some(kind) = MapType::from_code(kind) else {
        return BAD_ARGUMENT;
    };
    let Some(headers) = map(state, kind) else {
        return BAD_ARGUMENT;
    };
    edit(headers);
    OK
}

fn add_header_maps(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_header_map_pairs",
        |mut c: Ctx, kind: i32, ptr_out: u32, len_out: u32| -> Result<i32> {
            let encoded = match MapType::from_code(kind).and_then(|k| map(c.data_mut(), k)) {
                Some(headers) => headers.encode(),
                None => return Ok(BAD_ARGUMENT),
            };
            give(
                &mut c,
                "proxy_get_header_map_pairs",
                encoded,
                ptr_out,
                len_out,
            )
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_header_map_pairs",
        |mut c: Ctx, kind: i32, ptr: u32, len: u32| -> Result<i32> {
            let bytes = read(&mut c, "proxy_set_header_map_pairs", ptr, len)?;
            let new = pairs::decode(&bytes)?;
            Ok(edit_map(c.data_mut(), kind, |headers| {
                *headers = Headers::from_pairs(new)
            }))
        },
    )?;
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_header_map_value",
        |mut c: Ctx,
         kind: i32,
         key_ptr: u32,
         key_len: u32,
         ptr_out: u32,
         len_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_get_header_map_value";
            let value = with_guest_bytes(&mut c, F, (key_ptr, key_len), |key, state| {
                let headers = MapType::from_code(kind).and_then(|k| map(state, k))?;
                Some(headers.get(key).map(<[u8]>::to_vec))
            })?;
            let Some(value) = value else {
                return Ok(BAD_ARGUMENT);
            };
            let Some(value) = value else {
                return Ok(NOT_FOUND);
            };
            give(
                &mut c,
                "proxy_get_header_map_value",
                value,
                ptr_out,
                len_out,
            )
        },
    )?;
    for (name, op) in [
        (
            "proxy_replace_header_map_value",
            Headers::replace as fn(&mut Headers, &[u8], Vec<u8>),
        ),
        ("proxy_add_header_map_value", Headers::add),
    ] {
        linker.func_wrap(
            MODULE,
            name,
            move |mut c: Ctx,
                  kind: i32,
                  key_ptr: u32,
                  key_len: u32,
                  value_ptr: u32,
                  value_len: u32|
                  -> Result<i32> {
                // The key is parsed where it lies (a header name copies it).
                let value = read(&mut c, "header map edit", value_ptr, value_len)?;
                with_guest_bytes(
                    &mut c,
                    "header map edit",
                    (key_ptr, key_len),
                    |key, state| edit_map(state, kind, |headers| op(headers, key, value)),
                )
            },
        )?;
    }
    linker.func_wrap(
        MODULE,
        "proxy_remove_header_map_value",
        |mut c: Ctx, kind: i32, key_ptr: u32, key_len: u32| -> Result<i32> {
            const F: &str = "proxy_remove_header_map_value";
            with_guest_bytes(&mut c, F, (key_ptr, key_len), |key, state| {
                edit_map(state, kind, |headers| headers.remove(key))
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_header_map_size",
        |mut c: Ctx, kind: i32, out: u32| -> Result<i32> {
            let size = match MapType::from_code(kind).and_then(|k| map(c.data_mut(), k)) {
                Some(headers) => headers.encoded_len() as u32,
                None => return Ok(BAD_ARGUMENT),
            };
            write_u32(&mut c, "proxy_get_header_map_size", out, size)?;
            Ok(OK)
        },
    )?;
    Ok(())
}

fn add_properties(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_property",
        |mut c: Ctx, path_ptr: u32, path_len: u32, ptr_out: u32, len_out: u32| -> Result<i32> {
            let value = with_guest_bytes(
                &mut c,
                "proxy_get_property",
                (path_ptr, path_len),
                |path, state| crate::properties::get(state, path),
            )?;
            let Some(value) = value else {
                return Ok(NOT_FOUND);
            };
            give(&mut c, "proxy_get_property", value, ptr_out, len_out)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_property",
        |mut c: Ctx, path_ptr: u32, path_len: u32, value_ptr: u32, value_len: u32| -> Result<i32> {
            let path = read(&mut c, "proxy_set_property", path_ptr, path_len)?;
            let value = read(&mut c, "proxy_set_property", value_ptr, value_len)?;
            let path = path.strip_suffix(&[0]).map(<[u8]>::to_vec).unwrap_or(path);
            if path == b"wasm_need_rebuild" {
                // Higress's host convention: a request to replace this VM.
                c.data_mut().rebuild_requested = value == b"true";
                return Ok(OK);
            }
            c.data_mut().exchange.properties.insert(path, value);
            Ok(OK)
        },
    )?;
    Ok(())
}

fn add_stream_control(linker: &mut Linker<FilterState>) -> Result<()> {
    // Resuming and closing are recorded for the gateway, which acts on them
    // when the callback returns.
    linker.func_wrap(MODULE, "proxy_continue_stream", |mut c: Ctx, kind: i32| {
        record_stream(&mut c.data_mut().resumed, kind)
    })?;
    linker.func_wrap(MODULE, "proxy_close_stream", |mut c: Ctx, kind: i32| {
        record_stream(&mut c.data_mut().closed, kind)
    })?;
    // ABI 0.1.0 names.
    linker.func_wrap(MODULE, "proxy_continue_request", |mut c: Ctx| -> i32 {
        c.data_mut().resumed.push(StreamType::Request);
        OK
    })?;
    linker.func_wrap(MODULE, "proxy_continue_response", |mut c: Ctx| -> i32 {
        c.data_mut().resumed.push(StreamType::Response);
        OK
    })?;
    linker.func_wrap(
        MODULE,
        "proxy_send_local_response",
        |mut c: Ctx,
         status: u32,
         details_ptr: u32,
         details_len: u32,
         body_ptr: u32,
         body_len: u32,
         headers_ptr: u32,
         headers_len: u32,
         grpc_status: i32|
         -> Result<i32> {
            let details = read(
                &mut c,
                "proxy_send_local_response",
                details_ptr,
                details_len,
            )?;
            let body = read(&mut c, "proxy_send_local_response", body_ptr, body_len)?;
            let headers = Headers::from_pairs(pairs::decode(&read(
                &mut c,
                "proxy_send_local_response",
                headers_ptr,
                headers_len,
            )?)?);
            if !(100..=999).contains(&status) {
                return Ok(BAD_ARGUMENT);
            }
            c.data_mut().exchange.local_response = Some(LocalResponse {
                status,
                details: String::from_utf8_lossy(&details).into_owned(),
                headers,
                body,
                // -1 (every SDK's default) is none.
                grpc_status: u32::try_from(grpc_status).ok(),
            });
            Ok(OK)
        },
    )?;
    // One instance serves one stream at a time, so the only contexts a
    // callback can point at are the root and that stream.
    linker.func_wrap(
        MODULE,
        "proxy_set_effective_context",
        |c: Ctx, context: u32| -> i32 {
            if context == crate::instance::ROOT_CONTEXT_ID
                || c.data().stream_context == Some(context)
            {
                OK
            } else {
                BAD_ARGUMENT
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_http_call",
        |mut c: Ctx,
         upstream_ptr: u32,
         upstream_len: u32,
         headers_ptr: u32,
         headers_len: u32,
         body_ptr: u32,
         body_len: u32,
         trailers_ptr: u32,
         trailers_len: u32,
         timeout_ms: u32,
         token_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_http_call";
            let upstream = read(&mut c, F, upstream_ptr, upstream_len)?;
            let headers =
                Headers::from_pairs(pairs::decode(&read(&mut c, F, headers_ptr, headers_len)?)?);
            let body = read(&mut c, F, body_ptr, body_len)?;
            let trailers = Headers::from_pairs(pairs::decode(&read(
                &mut c,
                F,
                trailers_ptr,
                trailers_len,
            )?)?);
            let upstream = String::from_utf8_lossy(&upstream).into_owned();
            let known = match &c.data().plugin.config.http_caller {
                Some(caller) => caller.has_upstream(&upstream),
                None => false,
            };
            // The SDKs need a method, a path and an authority to build a request.
            let has = |name: &[u8]| headers.get(name).is_some();
            if !known || !has(b":method") || !has(b":path") {
                return Ok(BAD_ARGUMENT);
            }
            if let Some(status) = too_many_calls(&c, F) {
                return Ok(status);
            }
            let state = c.data_mut();
            let max_reply_bytes = state.plugin.config.limits.call_reply_bytes;
            let token = state.dispatch(Callout::Http(Box::new(HttpCallRequest {
                upstream,
                headers,
                body,
                trailers,
                timeout: std::time::Duration::from_millis(timeout_ms.max(1) as u64),
                max_reply_bytes,
            })));
            write_u32(&mut c, F, token_out, token)?;
            Ok(OK)
        },
    )?;
    add_grpc_calls(linker)?;
    linker.func_wrap(MODULE, "proxy_done", |_: Ctx| OK)?;
    // The one status this host has: the outcome of the last http call
    // (0 when it was answered, 14 UNAVAILABLE with the reason when not).
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_status",
        |mut c: Ctx, code_out: u32, ptr_out: u32, len_out: u32| -> Result<i32> {
            let (code, message) = c.data().last_call_status.clone();
            write_u32(&mut c, "proxy_get_status", code_out, code)?;
            give(
                &mut c,
                "proxy_get_status",
                message.into_bytes(),
                ptr_out,
                len_out,
            )
        },
    )?;
    Ok(())
}

/// Unary gRPC calls (`grpc_call.rs`) and gRPC streams (`grpc_stream.rs`).
fn add_grpc_calls(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_grpc_call",
        |mut c: Ctx,
         upstream_ptr: u32,
         upstream_len: u32,
         service_ptr: u32,
         service_len: u32,
         method_ptr: u32,
         method_len: u32,
         metadata_ptr: u32,
         metadata_len: u32,
         message_ptr: u32,
         message_len: u32,
         timeout_ms: u32,
         token_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_grpc_call";
            let target = [
                (upstream_ptr, upstream_len),
                (service_ptr, service_len),
                (method_ptr, method_len),
                (metadata_ptr, metadata_len),
            ];
            let Some(target) = grpc_target(&mut c, F, target)? else {
                return Ok(Status::ParseFailure as i32);
            };
            if let Some(status) = too_many_calls(&c, F) {
                return Ok(status);
            }
            let message = read(&mut c, F, message_ptr, message_len)?;
            let state = c.data_mut();
            let token = state.dispatch(Callout::Grpc(Box::new(GrpcCallRequest {
                target,
                message,
                timeout: std::time::Duration::from_millis(timeout_ms.max(1) as u64),
            })));
            write_u32(&mut c, F, token_out, token)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_grpc_stream",
        |mut c: Ctx,
         upstream_ptr: u32,
         upstream_len: u32,
         service_ptr: u32,
         service_len: u32,
         method_ptr: u32,
         method_len: u32,
         metadata_ptr: u32,
         metadata_len: u32,
         token_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_grpc_stream";
            let target = [
                (upstream_ptr, upstream_len),
                (service_ptr, service_len),
                (method_ptr, method_len),
                (metadata_ptr, metadata_len),
            ];
            let Some(target) = grpc_target(&mut c, F, target)? else {
                return Ok(Status::ParseFailure as i32);
            };
            if let Some(status) = too_many_calls(&c, F) {
                return Ok(status);
            }
            let state = c.data_mut();
            let token = state.dispatch(Callout::GrpcStream(Box::new(GrpcStreamRequest { target })));
            state.grpc_streams.insert(token, Default::default());
            write_u32(&mut c, F, token_out, token)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_grpc_send",
        |mut c: Ctx,
         token: u32,
         message_ptr: u32,
         message_len: u32,
         end_of_stream: u32|
         -> Result<i32> {
            const F: &str = "proxy_grpc_send";
            let Some(queue) = c.data().grpc_streams.get(&token).cloned() else {
                return Ok(NOT_FOUND);
            };
            // The Rust SDK sends a null pointer for "no message, only the end".
            // A message the stream's send queue has no room for is
            // BadArgument (the SDKs expect it; NotFound would say the
            // stream is gone), and the end is not recorded either.
            let message = match (message_ptr, message_len) {
                (0, 0) => None,
                _ => {
                    let admitted = with_guest_bytes(
                        &mut c,
                        F,
                        (message_ptr, message_len),
                        |message, state| queue.admit(message, &state.plugin.config.limits),
                    )?;
                    match admitted {
                        Ok(queued) => Some(queued),
                        Err(limit) => return Ok(refused(&c, F, limit, Status::BadArgument)),
                    }
                }
            };
            c.data_mut().dispatched_calls.push((
                token,
                Callout::GrpcSend {
                    message,
                    end_of_stream: end_of_stream != 0,
                },
            ));
            Ok(OK)
        },
    )?;
    // On a stream, close ends the filter's side and cancel resets it; on a
    // unary call, both cancel it (as in Envoy).
    linker.func_wrap(
        MODULE,
        "proxy_grpc_close",
        |mut c: Ctx, token: u32| -> i32 {
            let state = c.data_mut();
            if state.grpc_streams.contains_key(&token) {
                let end = Callout::GrpcSend {
                    message: None,
                    end_of_stream: true,
                };
                state.dispatched_calls.push((token, end));
                return OK;
            }
            cancel_call(state, token)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_grpc_cancel",
        |mut c: Ctx, token: u32| -> i32 {
            let state = c.data_mut();
            state.grpc_streams.remove(&token);
            cancel_call(state, token)
        },
    )?;
    Ok(())
}

/// A gRPC call's or stream's upstream, service, method and initial metadata,
/// read from the guest; None when they name nothing callable (the SDKs
/// expect ParseFailure then: Envoy cannot parse the name as a cluster or a
/// GrpcService).
fn grpc_target(
    c: &mut Ctx,
    function: &'static str,
    [upstream, service, method, metadata]: [(u32, u32); 4],
) -> Result<Option<GrpcTarget>> {
    let mut text = |(ptr, len): (u32, u32)| -> Result<String> {
        Ok(String::from_utf8_lossy(&read(c, function, ptr, len)?).into_owned())
    };
    let (upstream, service, method) = (text(upstream)?, text(service)?, text(method)?);
    let metadata = read(c, function, metadata.0, metadata.1)?;
    let metadata = Headers::from_pairs(pairs::decode(&metadata)?);
    let known = match &c.data().plugin.config.http_caller {
        Some(caller) => caller.has_upstream(&upstream),
        None => false,
    };
    if !known || service.is_empty() || method.is_empty() {
        return Ok(None);
    }
    Ok(Some(GrpcTarget {
        upstream,
        service,
        method,
        metadata,
    }))
}

fn cancel_call(state: &mut FilterState, token: u32) -> i32 {
    if token == 0 || token > state.last_call_token {
        return NOT_FOUND;
    }
    state.cancelled_calls.push(token);
    OK
}

fn add_shared_data_and_queues(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_get_shared_data",
        |mut c: Ctx,
         key_ptr: u32,
         key_len: u32,
         ptr_out: u32,
         len_out: u32,
         cas_out: u32|
         -> Result<i32> {
            let key = read(&mut c, "proxy_get_shared_data", key_ptr, key_len)?;
            let Some((value, cas)) = shared().get(&c.data().plugin.config.vm_id, &key) else {
                return Ok(NOT_FOUND);
            };
            let outs = (ptr_out, len_out);
            give_then(
                &mut c,
                "proxy_get_shared_data",
                value,
                outs,
                Some((cas_out, cas)),
            )
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_shared_data",
        |mut c: Ctx,
         key_ptr: u32,
         key_len: u32,
         value_ptr: u32,
         value_len: u32,
         cas: u32|
         -> Result<i32> {
            const F: &str = "proxy_set_shared_data";
            let key = read(&mut c, F, key_ptr, key_len)?;
            let value = read(&mut c, F, value_ptr, value_len)?;
            let config = &c.data().plugin.config;
            Ok(
                match shared().set_within(&config.vm_id, &key, value, cas, &config.limits) {
                    Ok(()) => OK,
                    Err(Refused::Status(status)) => status as i32,
                    // An entry that can never fit is a bad argument; a VM
                    // id whose share is full, a failure of the moment.
                    Err(Refused::Limit(limit @ Limit::SharedDataValueBytes)) => {
                        refused(&c, F, limit, Status::BadArgument)
                    }
                    Err(Refused::Limit(limit)) => refused(&c, F, limit, Status::InternalFailure),
                },
            )
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_register_shared_queue",
        |mut c: Ctx, name_ptr: u32, name_len: u32, id_out: u32| -> Result<i32> {
            const F: &str = "proxy_register_shared_queue";
            let name = read(&mut c, F, name_ptr, name_len)?;
            let config = &c.data().plugin.config;
            let id = match shared().register_queue_within(&config.vm_id, &name, &config.limits) {
                Ok(id) => id,
                Err(limit) => return Ok(refused(&c, F, limit, Status::InternalFailure)),
            };
            if !c.data().registered_queues.contains(&id) {
                c.data_mut().registered_queues.push(id);
            }
            write_u32(&mut c, "proxy_register_shared_queue", id_out, id)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_resolve_shared_queue",
        |mut c: Ctx,
         vm_ptr: u32,
         vm_len: u32,
         name_ptr: u32,
         name_len: u32,
         id_out: u32|
         -> Result<i32> {
            let vm_id = read(&mut c, "proxy_resolve_shared_queue", vm_ptr, vm_len)?;
            let name = read(&mut c, "proxy_resolve_shared_queue", name_ptr, name_len)?;
            // An empty VM id means the caller's own; another's queues are
            // not the filter's to reach (Envoy lets any VM fill and drain
            // them): not found.
            let own = &c.data().plugin.config.vm_id;
            if !vm_id.is_empty() && vm_id != own.as_bytes() {
                return Ok(NOT_FOUND);
            }
            match shared().resolve_queue(own, &name) {
                Some(id) => {
                    write_u32(&mut c, "proxy_resolve_shared_queue", id_out, id)?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_enqueue_shared_queue",
        |mut c: Ctx, id: u32, value_ptr: u32, value_len: u32| -> Result<i32> {
            const F: &str = "proxy_enqueue_shared_queue";
            let value = read(&mut c, F, value_ptr, value_len)?;
            let config = &c.data().plugin.config;
            // A full queue is NotFound: the one failure the SDKs expect
            // here (the Rust SDK panics on any other).
            Ok(
                match shared().enqueue_within(Some(&config.vm_id), id, value, &config.limits) {
                    Ok(()) => OK,
                    Err(Refused::Status(status)) => status as i32,
                    Err(Refused::Limit(limit)) => refused(&c, F, limit, Status::NotFound),
                },
            )
        },
    )?;
    linker.func_wrap(
        GIVING_MODULE,
        "proxy_dequeue_shared_queue",
        |mut c: Ctx, id: u32, ptr_out: u32, len_out: u32| -> Result<i32> {
            match shared().dequeue_as(Some(&c.data().plugin.config.vm_id), id) {
                Ok(value) => give(
                    &mut c,
                    "proxy_dequeue_shared_queue",
                    value,
                    ptr_out,
                    len_out,
                ),
                Err(status) => Ok(status as i32),
            }
        },
    )?;
    Ok(())
}

fn add_metrics(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_define_metric",
        |mut c: Ctx, kind: i32, name_ptr: u32, name_len: u32, id_out: u32| -> Result<i32> {
            let kind = match kind {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Ok(BAD_ARGUMENT),
            };
            let name = read(&mut c, "proxy_define_metric", name_ptr, name_len)?;
            let plugin = c.data().plugin.config.name.clone();
            let id = shared().define_metric(kind, &plugin, &String::from_utf8_lossy(&name));
            write_u32(&mut c, "proxy_define_metric", id_out, id)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_increment_metric",
        |c: Ctx, id: u32, offset: i64| {
            shared().increment_metric(id, &c.data().plugin.config.name, offset) as i32
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_record_metric",
        |c: Ctx, id: u32, value: i64| {
            shared().record_metric(id, &c.data().plugin.config.name, value) as i32
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_metric",
        |mut c: Ctx, id: u32, out: u32| -> Result<i32> {
            let Some(metric) = shared()
                .metric(id)
                .filter(|m| m.plugin == c.data().plugin.config.name)
            else {
                return Ok(NOT_FOUND);
            };
            let value = match metric.kind {
                MetricKind::Histogram => return Ok(BAD_ARGUMENT),
                _ => metric.value as u64,
            };
            write(&mut c, "proxy_get_metric", out, &value.to_le_bytes())?;
            Ok(OK)
        },
    )?;
    Ok(())
}

fn record_stream(list: &mut Vec<StreamType>, kind: i32) -> i32 {
    match StreamType::from_code(kind) {
        Some(stream) => {
            list.push(stream);
            OK
        }
        None => BAD_ARGUMENT,
    }
}

/// ABI extensions wasmgate does not know (Higress's Redis calls in ABI
/// 0.2.100, say) still link: every other `env` function the module imports
/// returns Unimplemented when it returns a status, and traps with a message
/// naming it otherwise. Returns the names so they can be logged.
pub fn stub_unknown_imports(
    linker: &mut Linker<FilterState>,
    module: &wasmtime::Module,
) -> Vec<String> {
    let mut stubbed = Vec::new();
    for import in module.imports().filter(|i| i.module() == MODULE) {
        let Some(ty) = import.ty().func().cloned() else {
            continue;
        };
        let name = import.name().to_string();
        let returns_status = matches!(ty.results().collect::<Vec<_>>().as_slice(), [ValType::I32]);
        let message = format!("{name} is not implemented by wasmgate");
        let defined = linker.func_new(MODULE, &name, ty, move |_, _, results: &mut [Val]| {
            if returns_status {
                results[0] = Val::I32(Status::Unimplemented as i32);
                Ok(())
            } else {
                Err(wasmtime::Error::msg(message.clone()))
            }
        });
        // An error means the function is already defined: a real one.
        if defined.is_ok() {
            stubbed.push(name);
        }
    }
    stubbed
}

/// Higress's Redis extension (see `redis_call.rs`).
fn add_redis(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_redis_init",
        |mut c: Ctx,
         cluster_ptr: u32,
         cluster_len: u32,
         user_ptr: u32,
         user_len: u32,
         password_ptr: u32,
         password_len: u32,
         timeout_ms: u32|
         -> Result<i32> {
            const F: &str = "proxy_redis_init";
            let cluster = read(&mut c, F, cluster_ptr, cluster_len)?;
            let cluster = String::from_utf8_lossy(&cluster).into_owned();
            // Go gives an empty string as a null pointer: only read real ones.
            let text = |c: &mut Ctx, ptr, len| -> Result<Option<String>> {
                Ok(match len {
                    0 => None,
                    _ => Some(String::from_utf8_lossy(&read(c, F, ptr, len)?).into_owned()),
                })
            };
            let username = text(&mut c, user_ptr, user_len)?;
            let password = text(&mut c, password_ptr, password_len)?;
            let base = base_cluster(&cluster).to_string();
            if c.data()
                .plugin
                .config
                .services
                .redis_for_cluster(&base)
                .is_none()
            {
                return Ok(BAD_ARGUMENT);
            }
            let init = RedisInit {
                access: wasmgate_services::redis::Access {
                    username,
                    password,
                    db: wasmgate_services::redis::db_of_cluster(&cluster),
                },
                timeout: match timeout_ms {
                    0 => None,
                    ms => Some(std::time::Duration::from_millis(ms as u64)),
                },
            };
            c.data_mut().redis_inits.insert(base, init);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_redis_call",
        |mut c: Ctx,
         cluster_ptr: u32,
         cluster_len: u32,
         query_ptr: u32,
         query_len: u32,
         token_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_redis_call";
            let cluster = read(&mut c, F, cluster_ptr, cluster_len)?;
            let cluster = String::from_utf8_lossy(&cluster).into_owned();
            let query = read(&mut c, F, query_ptr, query_len)?;
            let base = base_cluster(&cluster).to_string();
            let state = c.data_mut();
            if query.is_empty()
                || state
                    .plugin
                    .config
                    .services
                    .redis_for_cluster(&base)
                    .is_none()
            {
                return Ok(BAD_ARGUMENT);
            }
            if let Some(status) = too_many_calls(&c, F) {
                return Ok(status);
            }
            let state = c.data_mut();
            // A call without init uses the service's own credentials, as
            // Envoy uses its defaults.
            let init = state.redis_inits.get(&base).cloned();
            let mut access = init.as_ref().map(|i| i.access.clone()).unwrap_or_default();
            if let Some(db) = wasmgate_services::redis::db_of_cluster(&cluster) {
                access.db = Some(db);
            }
            let token = state.dispatch(Callout::Redis(RedisCallRequest {
                cluster: base,
                access,
                query,
                timeout: init.and_then(|i| i.timeout),
            }));
            write_u32(&mut c, F, token_out, token)?;
            Ok(OK)
        },
    )?;
    Ok(())
}

/// Functions of the Proxy-Wasm ABI that wasmgate links but does not offer,
/// with their number of i32 parameters and the status they answer. Every
/// SDK's module imports them (the Rust SDK links all of its ABI), so
/// importing one is normal and says nothing: only a call does, and it is
/// logged once per plugin and function. The statuses are ones the SDKs
/// turn into an error for the plugin (the Rust SDK panics on any status it
/// does not expect, Unimplemented included): no foreign function is
/// registered under any name (NotFound).
const UNIMPLEMENTED: &[(&str, usize, Status)] =
    &[("proxy_call_foreign_function", 6, Status::NotFound)];

fn add_unimplemented(linker: &mut Linker<FilterState>) -> Result<()> {
    for &(name, i32s, status) in UNIMPLEMENTED {
        let ty = FuncType::new(
            linker.engine(),
            std::iter::repeat_n(ValType::I32, i32s),
            [ValType::I32],
        );
        linker.func_new(MODULE, name, ty, move |c, _, results: &mut [Val]| {
            let plugin = &c.data().plugin.config.name;
            if first_call_of(plugin, name) {
                tracing::warn!(
                    plugin = %plugin,
                    function = name,
                    status = ?status,
                    "the plugin called a Proxy-Wasm host function wasmgate does not implement (logged once per plugin)"
                );
            }
            results[0] = Val::I32(status as i32);
            Ok(())
        })?;
    }
    // Emscripten-built modules (the C++ SDK) tell the host when their memory
    // grows; nothing here caches the memory's size, so there is nothing to do.
    linker.func_wrap(
        MODULE,
        "emscripten_notify_memory_growth",
        |_: Ctx, _: i32| {},
    )?;
    Ok(())
}

/// Whether this process has not yet seen plugin `plugin` call `function`.
fn first_call_of(plugin: &str, function: &'static str) -> bool {
    static SEEN: std::sync::Mutex<Vec<(String, &'static str)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|(p, f)| p == plugin && *f == function) {
        return false;
    }
    seen.push((plugin.to_string(), function));
    true
}

/// The `env` functions `module` imports that are not part of the
/// Proxy-Wasm ABI wasmgate knows (an extension of another host, say): they
/// are stubbed at load, and calling one fails (Unimplemented, or a trap for
/// a function without a status to return). What `wasmgate check` reports.
/// The ABI's own functions wasmgate leaves out ([`UNIMPLEMENTED`]) are not
/// listed: every SDK imports them.
pub fn unimplemented_imports(engine: &wasmtime::Engine, module: &wasmtime::Module) -> Vec<String> {
    let mut linker = Linker::new(engine);
    add_to_linker(&mut linker).expect("the host functions link into an empty linker");
    let mut missing = stub_unknown_imports(&mut linker, module);
    missing.sort();
    missing.dedup();
    missing
}
