//! Properties (`proxy_get_property`, `proxy_set_property`): what the host
//! knows of the request, the plugin and the node (`crate::properties`), and
//! what the filter stores on the stream.

use wasmtime::Linker;

use super::{Ctx, Result, GIVING_MODULE, MODULE, NOT_FOUND, OK};
use crate::state::{give, read, with_guest_bytes, FilterState};

pub(super) fn add_properties(linker: &mut Linker<FilterState>) -> Result<()> {
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
