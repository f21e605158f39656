//! What each filter instance's store holds, and access to the guest's memory.

use std::sync::Arc;

use wasmgate_runtime::limits::HasCallBudget;
use wasmgate_runtime::{CallBudget, MemoryLimiter};
use wasmtime::{AsContextMut, Caller, Memory, TypedFunc};
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::abi::StreamType;
use crate::callout::Callout;
use crate::exchange::HttpExchange;
use crate::http_call::HttpCallResponse;
use crate::plugin::FilterShared;
use crate::redis_call::RedisInit;

/// Store data of one Proxy-Wasm instance.
pub struct FilterState {
    pub(crate) plugin: Arc<FilterShared>,
    /// The exchange the current callback works on (moved in for the callback).
    pub(crate) exchange: HttpExchange,
    /// Set once the instance exists.
    pub(crate) guest: Option<GuestMemory>,
    /// `proxy_continue_stream` / `proxy_close_stream` calls seen during the callback.
    pub(crate) resumed: Vec<StreamType>,
    pub(crate) closed: Vec<StreamType>,
    pub(crate) tick_period_ms: u32,
    /// The stream context the instance is serving, if any: the one
    /// `proxy_set_effective_context` may point at besides the root.
    pub(crate) stream_context: Option<u32>,
    /// Calls `proxy_http_call` and `proxy_redis_call` recorded during the
    /// callback, with their tokens (see `callout.rs`).
    pub(crate) dispatched_calls: Vec<(u32, Callout)>,
    pub(crate) last_call_token: u32,
    /// The answer `proxy_on_http_call_response` is reading.
    pub(crate) call_response: Option<HttpCallResponse>,
    /// The reply `proxy_on_redis_call_response` is reading (buffer 9).
    pub(crate) redis_reply: Option<Vec<u8>>,
    /// What `proxy_redis_init` set up, by cluster (without `?...`).
    pub(crate) redis_inits: std::collections::HashMap<String, RedisInit>,
    /// What `proxy_get_status` reports: the outcome of the last callout
    /// delivered to this instance, as a gRPC status code and message.
    pub(crate) last_call_status: (u32, String),
    /// Queues this instance registered: its root context hears when they fill.
    pub(crate) registered_queues: Vec<u32>,
    /// Calls into the guest's allocator in progress (see [`give`]).
    pub(crate) allocating: u32,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) budget: CallBudget,
    pub(crate) wasi: Option<WasiP1Ctx>,
}

impl FilterState {
    pub(crate) fn new(plugin: Arc<FilterShared>, wasi: Option<WasiP1Ctx>) -> FilterState {
        FilterState {
            limiter: MemoryLimiter::new(plugin.config.memory_limit)
                .counted_in(plugin.stats.clone()),
            plugin,
            exchange: HttpExchange::default(),
            guest: None,
            resumed: Vec::new(),
            closed: Vec::new(),
            tick_period_ms: 0,
            stream_context: None,
            dispatched_calls: Vec::new(),
            last_call_token: 0,
            call_response: None,
            redis_reply: None,
            redis_inits: std::collections::HashMap::new(),
            last_call_status: (0, String::new()),
            registered_queues: Vec::new(),
            allocating: 0,
            budget: CallBudget::new(),
            wasi,
        }
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

/// Copies `len` bytes at `ptr` out of the guest.
pub(crate) fn read(
    c: &mut Ctx,
    function: &'static str,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<Vec<u8>> {
    let memory = guest(c).memory;
    let data = memory.data(&*c);
    data.get(ptr as usize..ptr as usize + len as usize)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            BadGuestPointer {
                function,
                ptr,
                len,
                size: data.len(),
            }
            .into()
        })
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

/// Most calls into the guest's allocator in progress at once. An allocator
/// that asks the host for bytes re-enters `give`, and each call into the
/// guest from a host function takes a fiber stack of its own: unbounded, one
/// guest held all of the engine's pooled stacks (failing every other
/// plugin's calls meanwhile), or without the pool mapped stacks until the
/// process ran out of memory mappings (found by tests/fuzz_host.rs). SDK
/// allocators never call the host.
const MAX_NESTED_ALLOCATIONS: u32 = 4;

/// Hands `bytes` to the guest: allocates them with the guest's allocator
/// (the SDKs free them with theirs), and stores the pointer and the length at
/// `ptr_out` and `len_out`.
pub(crate) async fn give(
    c: &mut Ctx<'_>,
    function: &'static str,
    bytes: &[u8],
    ptr_out: u32,
    len_out: u32,
) -> wasmtime::Result<()> {
    let ptr = if bytes.is_empty() {
        0
    } else {
        // Cloning a TypedFunc copies its reference-counted type: only pay
        // for it when there is something to allocate.
        if c.data().allocating >= MAX_NESTED_ALLOCATIONS {
            wasmtime::bail!(
                "{function}: the guest's allocator re-entered the host {MAX_NESTED_ALLOCATIONS} calls deep"
            );
        }
        let allocate = guest(c).allocate.clone();
        c.data_mut().allocating += 1;
        let ptr = allocate
            .call_async(c.as_context_mut(), bytes.len() as u32)
            .await;
        c.data_mut().allocating -= 1;
        let ptr = ptr?;
        if ptr == 0 {
            wasmtime::bail!(
                "{function}: the guest could not allocate {} bytes",
                bytes.len()
            );
        }
        write(c, function, ptr, bytes)?;
        ptr
    };
    write_u32(c, function, ptr_out, ptr)?;
    write_u32(c, function, len_out, bytes.len() as u32)
}
