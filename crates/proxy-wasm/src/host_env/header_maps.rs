//! Header maps (`proxy_*_header_map_*`): the request's and response's
//! headers and trailers, an http call's answer, a gRPC stream's metadata.

use wasmtime::Linker;

use super::{Ctx, Result, BAD_ARGUMENT, GIVING_MODULE, MODULE, NOT_FOUND, OK};
use crate::abi::MapType;
use crate::headers::Headers;
use crate::pairs;
use crate::state::{give, read, with_guest_bytes, write_u32, FilterState};

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

pub(super) fn add_header_maps(linker: &mut Linker<FilterState>) -> Result<()> {
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
