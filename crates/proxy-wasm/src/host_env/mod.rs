//! Every Proxy-Wasm host function (import module `env`), for ABI 0.1.0 to
//! 0.2.1, and Higress's Redis extension (0.2.100, `redis_call.rs`).
//! Pointers and lengths from the guest are checked: a bad one fails the
//! filter's callback with an error naming the function. Statuses are the
//! ones the SDKs expect for each function; what a call may make the host hold
//! is capped (`limits.rs`, which says which status each cap answers).
//!
//! One file per section of the ABI (logging and time, buffers, header maps,
//! properties, stream control, http calls, gRPC calls, shared data, shared
//! queues, metrics, Higress's Redis calls, the functions left out), each
//! with its `add_*`; [`add_to_linker`] links them all, here in one place.
//! The functions that hand the guest a value are linked under
//! [`GIVING_MODULE`] and reach the guest through `giving.rs`.

use wasmtime::{Caller, FuncType, Linker, Val, ValType};

use crate::abi::Status;
use crate::limits::{refuse, Limit};
use crate::state::FilterState;

mod buffers;
mod grpc_calls;
mod header_maps;
mod http_calls;
mod logging_and_time;
mod metrics;
mod properties;
mod redis;
mod shared_data;
mod shared_queues;
mod stream_control;
mod unimplemented;

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

/// Links every host function, section by section.
pub fn add_to_linker(linker: &mut Linker<FilterState>) -> Result<()> {
    logging_and_time::add_logging_and_time(linker)?;
    buffers::add_buffers(linker)?;
    header_maps::add_header_maps(linker)?;
    properties::add_properties(linker)?;
    stream_control::add_stream_control(linker)?;
    http_calls::add_http_calls(linker)?;
    grpc_calls::add_grpc_calls(linker)?;
    shared_data::add_shared_data(linker)?;
    shared_queues::add_shared_queues(linker)?;
    metrics::add_metrics(linker)?;
    redis::add_redis(linker)?;
    unimplemented::add_unimplemented(linker)?;
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

/// The `env` functions `module` imports that are not part of the
/// Proxy-Wasm ABI wasmgate knows (an extension of another host, say): they
/// are stubbed at load, and calling one fails (Unimplemented, or a trap for
/// a function without a status to return). What `wasmgate check` reports.
/// The ABI's own functions wasmgate leaves out
/// ([`UNIMPLEMENTED`](unimplemented::UNIMPLEMENTED)) are not listed: every
/// SDK imports them.
pub fn unimplemented_imports(engine: &wasmtime::Engine, module: &wasmtime::Module) -> Vec<String> {
    let mut linker = Linker::new(engine);
    add_to_linker(&mut linker).expect("the host functions link into an empty linker");
    let mut missing = stub_unknown_imports(&mut linker, module);
    missing.sort();
    missing.dedup();
    missing
}
