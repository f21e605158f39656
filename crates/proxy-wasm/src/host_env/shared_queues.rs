//! Shared queues (`proxy_*_shared_queue`): the queues of one VM id
//! (`shared.rs`), whose registrant hears of new items in
//! `proxy_on_queue_ready` (`root.rs`).

use wasmtime::Linker;

use super::{refused, Ctx, Result, GIVING_MODULE, MODULE, NOT_FOUND, OK};
use crate::abi::Status;
use crate::shared::{shared, Refused};
use crate::state::{give, read, write_u32, FilterState};

pub(super) fn add_shared_queues(linker: &mut Linker<FilterState>) -> Result<()> {
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
