//! gRPC calls: unary calls (`proxy_grpc_call`, `grpc_call.rs`), streams
//! (`proxy_grpc_stream`, `proxy_grpc_send`, `grpc_stream.rs`), and their
//! closing and cancelling.

use wasmtime::Linker;

use super::{refused, too_many_calls, Ctx, Result, MODULE, NOT_FOUND, OK};
use crate::abi::Status;
use crate::callout::Callout;
use crate::grpc_call::{GrpcCallRequest, GrpcTarget};
use crate::grpc_stream::GrpcStreamRequest;
use crate::headers::Headers;
use crate::pairs;
use crate::state::{read, with_guest_bytes, write_u32, FilterState};

/// Unary gRPC calls (`grpc_call.rs`) and gRPC streams (`grpc_stream.rs`).
pub(super) fn add_grpc_calls(linker: &mut Linker<FilterState>) -> Result<()> {
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
