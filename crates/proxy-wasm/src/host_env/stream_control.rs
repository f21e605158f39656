//! Stream control: resuming and closing the stream (ABI 0.2's
//! `proxy_continue_stream` and `proxy_close_stream`, 0.1's names), a local
//! response, the effective context, and `proxy_done`.

use wasmtime::Linker;

use super::{Ctx, Result, BAD_ARGUMENT, MODULE, OK};
use crate::abi::StreamType;
use crate::exchange::LocalResponse;
use crate::headers::Headers;
use crate::pairs;
use crate::state::{read, FilterState};

pub(super) fn add_stream_control(linker: &mut Linker<FilterState>) -> Result<()> {
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
    linker.func_wrap(MODULE, "proxy_done", |_: Ctx| OK)?;
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
