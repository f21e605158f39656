//! What each filter instance's store holds, and access to the guest's memory.

use std::sync::Arc;

use wasmgate_base::traceparent;
use wasmgate_runtime::limits::HasCallBudget;
use wasmgate_runtime::{CallBudget, MemoryLimiter};
use wasmtime::{Caller, Memory, TypedFunc};
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::abi::{MapType, StreamType};
use crate::callout::Callout;
use crate::exchange::{HttpExchange, TraceIds};
use crate::filter_shared::FilterShared;
use crate::grpc_stream::SendQueue;
use crate::headers::Headers;
use crate::http_call::HttpCallResponse;
use crate::redis_call::RedisInit;

/// Store data of one Proxy-Wasm instance.
pub struct FilterState {
    pub(crate) plugin: Arc<FilterShared>,
    /// The exchange the current callback works on (moved in for the callback).
    pub(crate) exchange: Box<HttpExchange>,
    /// Set once the instance exists.
    pub(crate) guest: Option<GuestMemory>,
    /// `proxy_continue_stream` / `proxy_close_stream` calls seen during the callback.
    pub(crate) resumed: Vec<StreamType>,
    pub(crate) closed: Vec<StreamType>,
    pub(crate) tick_period_ms: u32,
    /// Higress's `wasm_need_rebuild` was set: the instance is replaced by
    /// a fresh one once its stream ends (Higress's framework asks after so
    /// many requests or so much memory, `WithRebuildAfterRequests` and
    /// `WithRebuildMaxMemBytes`, as Go's heap in Wasm never shrinks).
    pub(crate) rebuild_requested: bool,
    /// The stream context the instance is serving, if any: the one
    /// `proxy_set_effective_context` may point at besides the root.
    pub(crate) stream_context: Option<u32>,
    /// Calls `proxy_http_call` and `proxy_redis_call` recorded during the
    /// callback, with their tokens (see `callout.rs`).
    pub(crate) dispatched_calls: Vec<(u32, Callout)>,
    pub(crate) last_call_token: u32,
    /// The answer `proxy_on_http_call_response` is reading.
    pub(crate) call_response: Option<Box<HttpCallResponse>>,
    /// The reply `proxy_on_redis_call_response` is reading (buffer 9).
    pub(crate) redis_reply: Option<Vec<u8>>,
    /// The message `proxy_on_grpc_receive` is reading (buffer 5).
    pub(crate) grpc_reply: Option<Vec<u8>>,
    /// Calls the guest cancelled (`proxy_grpc_cancel`, `proxy_grpc_close`)
    /// during the callback: their answers are not delivered.
    pub(crate) cancelled_calls: Vec<u32>,
    /// The gRPC streams open on this instance (`grpc_stream.rs`), by
    /// token: what `proxy_grpc_send` may send on, with what each holds
    /// that the connection has not taken yet.
    pub(crate) grpc_streams: std::collections::HashMap<u32, Arc<SendQueue>>,
    /// Calls (and gRPC streams) of the context the instance serves that
    /// were started and are not over, as of the last time the context
    /// started or heard of one (`FilterInstance::start_dispatched_calls`,
    /// `deliver_answer`); with those dispatched in the running callback,
    /// what `calls_in_flight` caps.
    pub(crate) calls_in_flight: usize,
    /// The stream metadata a callback is reading (map 4 or 5).
    pub(crate) grpc_metadata: Option<(MapType, Headers)>,
    /// What `proxy_redis_init` set up, by cluster (without `?...`).
    pub(crate) redis_inits: std::collections::HashMap<String, RedisInit>,
    /// What `proxy_get_status` reports: the outcome of the last callout
    /// delivered to this instance, as a gRPC status code and message.
    pub(crate) last_call_status: (u32, String),
    /// Queues this instance registered: its root context hears when they fill.
    pub(crate) registered_queues: Vec<u32>,
    /// Values handed to the guest, waiting for its allocator (see [`give`]).
    pub(crate) handovers: Vec<Handover>,
    /// A whole response's body while its batched callbacks run (batch.rs):
    /// the body before `go_on` puts it in place, what the filter left of it
    /// after.
    pub(crate) whole_body: Vec<u8>,
    /// How far the batched callbacks of a whole response went.
    pub(crate) whole_step: crate::batch::WholeStep,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) budget: CallBudget,
    pub(crate) wasi: Option<WasiP1Ctx>,
}

impl FilterState {
    pub(crate) fn new(plugin: Arc<FilterShared>, wasi: Option<WasiP1Ctx>) -> FilterState {
        FilterState {
            // The start's cap; `FilterPlugin::instantiate` sets the
            // callbacks' once the start is over.
            limiter: MemoryLimiter::new(
                (plugin.config.startup_memory_limit).or(plugin.config.memory_limit),
            )
            .counted_in(plugin.stats.clone()),
            plugin,
            exchange: Box::default(),
            guest: None,
            rebuild_requested: false,
            resumed: Vec::new(),
            closed: Vec::new(),
            tick_period_ms: 0,
            stream_context: None,
            dispatched_calls: Vec::new(),
            last_call_token: 0,
            call_response: None,
            redis_reply: None,
            grpc_reply: None,
            cancelled_calls: Vec::new(),
            grpc_streams: std::collections::HashMap::new(),
            calls_in_flight: 0,
            grpc_metadata: None,
            redis_inits: std::collections::HashMap::new(),
            last_call_status: (0, String::new()),
            registered_queues: Vec::new(),
            handovers: Vec::new(),
            whole_body: Vec::new(),
            whole_step: crate::batch::WholeStep::Headers,
            budget: CallBudget::new(),
            wasi,
        }
    }

    /// Records a call a host function made for the context to send once
    /// the callback has returned; its token.
    pub(crate) fn dispatch(&mut self, mut callout: Callout) -> u32 {
        if let Some(trace) = &self.exchange.info.trace {
            carry_trace(&mut callout, trace);
        }
        self.last_call_token = self.last_call_token.wrapping_add(1).max(1);
        self.dispatched_calls.push((self.last_call_token, callout));
        self.last_call_token
    }

    /// Whether the context may start one more call (`calls_in_flight`):
    /// those in flight and those dispatched in this callback count.
    pub(crate) fn may_call(&self) -> bool {
        let dispatched = self
            .dispatched_calls
            .iter()
            .filter(|(_, callout)| !matches!(callout, Callout::GrpcSend { .. }))
            .count();
        self.calls_in_flight + dispatched < self.plugin.config.limits.calls_in_flight
    }

    pub(crate) fn wasi(&mut self) -> &mut WasiP1Ctx {
        self.wasi
            .as_mut()
            .expect("WASI imports are linked only for modules that get a WASI context")
    }
}

impl HasCallBudget for FilterState {
    fn call_budget(&mut self) -> &mut CallBudget {
        &mut self.budget
    }
    fn plugin_name(&self) -> &str {
        &self.plugin.config.name
    }
}

/// The guest's linear memory and its allocator (`proxy_on_memory_allocate`,
/// or `malloc` in older modules), through which the host hands it data.
#[derive(Clone)]
pub(crate) struct GuestMemory {
    pub memory: Memory,
    pub allocate: TypedFunc<u32, u32>,
}

/// A guest pointer or length the host refused: the call fails with this.
#[derive(Debug, thiserror::Error)]
#[error("{function}: guest range {ptr}+{len} is outside its {size}-byte memory")]
pub struct BadGuestPointer {
    pub function: &'static str,
    pub ptr: u32,
    pub len: u32,
    pub size: usize,
}

type Ctx<'a> = Caller<'a, FilterState>;

fn guest<'a>(c: &'a Ctx<'_>) -> &'a GuestMemory {
    c.data()
        .guest
        .as_ref()
        .expect("the guest's memory is known before any callback runs")
}

/// Runs `look_up` on the `len` bytes at `ptr` in the guest, in place, with
/// the store's state: for keys and paths the host only compares, which
/// [`read`] would copy (an allocation per lookup).
pub(crate) fn with_guest_bytes<R>(
    c: &mut Ctx,
    function: &'static str,
    (ptr, len): (u32, u32),
    look_up: impl FnOnce(&[u8], &mut FilterState) -> R,
) -> wasmtime::Result<R> {
    let memory = guest(c).memory;
    let (data, state) = memory.data_and_store_mut(&mut *c);
    let size = data.len();
    match data.get(ptr as usize..ptr as usize + len as usize) {
        Some(bytes) => Ok(look_up(bytes, state)),
        None => Err(BadGuestPointer {
            function,
            ptr,
            len,
            size,
        }
        .into()),
    }
}

/// Copies `len` bytes at `ptr` out of the guest.
pub(crate) fn read(
    c: &mut Ctx,
    function: &'static str,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<Vec<u8>> {
    with_guest_bytes(c, function, (ptr, len), |bytes, _| bytes.to_vec())
}

/// Writes `bytes` at `ptr` in the guest.
pub(crate) fn write(
    c: &mut Ctx,
    function: &'static str,
    ptr: u32,
    bytes: &[u8],
) -> wasmtime::Result<()> {
    let memory = guest(c).memory;
    let data = memory.data_mut(&mut *c);
    let size = data.len();
    match data.get_mut(ptr as usize..ptr as usize + bytes.len()) {
        Some(dest) => {
            dest.copy_from_slice(bytes);
            Ok(())
        }
        None => Err(BadGuestPointer {
            function,
            ptr,
            len: bytes.len() as u32,
            size,
        }
        .into()),
    }
}

pub(crate) fn write_u32(
    c: &mut Ctx,
    function: &'static str,
    ptr: u32,
    value: u32,
) -> wasmtime::Result<()> {
    write(c, function, ptr, &value.to_le_bytes())
}

/// Most values waiting for the guest's allocator at once. An allocator that
/// asks the host for bytes re-enters a giving function before the value
/// that called it is handed over: unbounded, a guest that always does
/// recursed until the host ran out (with a fiber per allocation, all of the
/// engine's pooled stacks; found by tests/host/fuzz_host/). SDK allocators
/// never call the host.
const MAX_WAITING_VALUES: usize = 4;

/// A value a host function hands to the guest, waiting for the guest's
/// allocator to make room for it (see `giving.rs`).
pub(crate) struct Handover {
    function: &'static str,
    bytes: Vec<u8>,
    ptr_out: u32,
    len_out: u32,
    /// A word the host function writes after the value, as it did when it
    /// called the allocator itself: `proxy_get_shared_data`'s CAS.
    then: Option<(u32, u32)>,
}

/// What a giving host function returns when it left a value waiting for
/// the guest's allocator: the giving module (`giving.rs`) then has the
/// allocator make room for it and answers the guest `Ok`. No status of the
/// ABI is negative.
pub(crate) const VALUE_WAITING: i32 = -1;

/// Hands `bytes` to the guest: once the guest's allocator has made room
/// for them (the SDKs free them with theirs), they are copied there and
/// the pointer and the length stored at `ptr_out` and `len_out`. Empty
/// bytes are a null pointer and a zero length at once. Returns the status
/// the host function returns: `Ok`, or [`VALUE_WAITING`].
///
/// The allocator runs after the host function returns: the functions that
/// give are reached through a module of ours (`giving.rs`) that calls the
/// allocator, wasm to wasm, and then [`complete_handover`]. Called from the
/// host function itself, it took a second fiber per value.
pub(crate) fn give(
    c: &mut Ctx<'_>,
    function: &'static str,
    bytes: Vec<u8>,
    ptr_out: u32,
    len_out: u32,
) -> wasmtime::Result<i32> {
    give_then(c, function, bytes, (ptr_out, len_out), None)
}

/// [`give`], then `then`'s word written at its pointer.
pub(crate) fn give_then(
    c: &mut Ctx<'_>,
    function: &'static str,
    bytes: Vec<u8>,
    (ptr_out, len_out): (u32, u32),
    then: Option<(u32, u32)>,
) -> wasmtime::Result<i32> {
    const OK: i32 = crate::abi::Status::Ok as i32;
    if bytes.is_empty() {
        write_u32(c, function, ptr_out, 0)?;
        write_u32(c, function, len_out, 0)?;
        if let Some((ptr, word)) = then {
            write_u32(c, function, ptr, word)?;
        }
        return Ok(OK);
    }
    let waiting = &mut c.data_mut().handovers;
    if waiting.len() >= MAX_WAITING_VALUES {
        wasmtime::bail!(
            "{function}: the guest's allocator re-entered the host {MAX_WAITING_VALUES} calls deep"
        );
    }
    waiting.push(Handover {
        function,
        bytes,
        ptr_out,
        len_out,
        then,
    });
    Ok(VALUE_WAITING)
}

/// The size of the value the allocator is to make room for next.
pub(crate) fn next_handover_len(c: &Ctx<'_>) -> u32 {
    c.data()
        .handovers
        .last()
        .map_or(0, |h| h.bytes.len() as u32)
}

/// Copies the next waiting value to `ptr`, where the guest's allocator made
/// room for it, and stores where it is.
pub(crate) fn complete_handover(c: &mut Ctx<'_>, ptr: u32) -> wasmtime::Result<()> {
    let Some(h) = c.data_mut().handovers.pop() else {
        wasmtime::bail!("no value waits for the guest's allocator");
    };
    if ptr == 0 {
        wasmtime::bail!(
            "{}: the guest could not allocate {} bytes",
            h.function,
            h.bytes.len()
        );
    }
    write(c, h.function, ptr, &h.bytes)?;
    write_u32(c, h.function, h.ptr_out, ptr)?;
    write_u32(c, h.function, h.len_out, h.bytes.len() as u32)?;
    if let Some((ptr, word)) = h.then {
        write_u32(c, h.function, ptr, word)?;
    }
    Ok(())
}

/// A traced request's HTTP and gRPC callouts carry its trace: a
/// `traceparent` naming the request's span as parent (the callee's spans
/// hang under it), with the request's sampled flag. A filter that set its
/// own `traceparent` keeps it.
fn carry_trace(callout: &mut Callout, trace: &TraceIds) {
    let headers = match callout {
        Callout::Http(request) => &mut request.headers,
        Callout::Grpc(call) => &mut call.target.metadata,
        Callout::GrpcStream(stream) => &mut stream.target.metadata,
        Callout::GrpcSend { .. } | Callout::Redis(_) => return,
    };
    if headers.get(b"traceparent").is_none() {
        let value = traceparent::format(&trace.trace_id, &trace.span_id, trace.sampled);
        headers.add(b"traceparent", value.to_vec());
    }
}
