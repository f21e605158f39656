//! Buffers (`proxy_get_buffer_bytes`, `proxy_set_buffer_bytes`): the
//! request's and response's bodies, the configurations, and the replies of
//! http, Redis and gRPC calls.

use wasmtime::Linker;

use super::{Ctx, Result, BAD_ARGUMENT, GIVING_MODULE, MODULE, NOT_FOUND, OK};
use crate::abi::BufferType;
use crate::state::{give, read, FilterState};

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

pub(super) fn add_buffers(linker: &mut Linker<FilterState>) -> Result<()> {
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
