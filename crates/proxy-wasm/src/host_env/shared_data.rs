//! Shared data (`proxy_get_shared_data`, `proxy_set_shared_data`): the
//! key-value store the instances of one VM id share (`shared.rs`), with
//! compare-and-swap.

use wasmtime::Linker;

use super::{refused, Ctx, Result, GIVING_MODULE, MODULE, NOT_FOUND, OK};
use crate::abi::Status;
use crate::limits::Limit;
use crate::shared::{shared, Refused};
use crate::state::{give_then, read, FilterState};

pub(super) fn add_shared_data(linker: &mut Linker<FilterState>) -> Result<()> {
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
    Ok(())
}
