//! Http calls (`proxy_http_call`, answered in `proxy_on_http_call_response`
//! through `instance.rs`) and `proxy_get_status`, the outcome of the last
//! call of any kind.

use wasmtime::Linker;

use super::{too_many_calls, Ctx, Result, BAD_ARGUMENT, GIVING_MODULE, MODULE, OK};
use crate::callout::Callout;
use crate::headers::Headers;
use crate::http_call::HttpCallRequest;
use crate::pairs;
use crate::state::{give, read, write_u32, FilterState};

pub(super) fn add_http_calls(linker: &mut Linker<FilterState>) -> Result<()> {
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
