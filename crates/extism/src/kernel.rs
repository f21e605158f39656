//! The kernel: a small wasm module (`kernel.wat`) instantiated next to each
//! plugin instance. Its linear memory holds the Extism memory's bytes and its
//! exports serve the PDKs' hottest imports (`load_u64`, `store_u64`,
//! `input_load_u64`, ...) as wasm-to-wasm calls; a host call costs several
//! times more, and the PDKs make one per 8 bytes of input and output.
//!
//! The host keeps the bookkeeping ([`crate::memory::ExtismMemory`]) and reaches the bytes
//! through the helpers below, which take the store so they can grow the
//! kernel's memory.

use anyhow::{Context, Result};
use wasmgate_runtime::Runtime;
use wasmtime::{
    Extern, FuncType, Instance, InstancePre, Linker, Memory, Module, ModuleExport, StoreContextMut,
};

use crate::memory::InputTooLarge;
use crate::state::ExtismState;

const SOURCE: &str = include_str!("kernel.wat");
const PAGE: u64 = 65536;

/// The `extism:host/env` functions the kernel serves instead of the host.
pub const FUNCTIONS: &[&str] = &[
    "load_u8",
    "load_u64",
    "store_u8",
    "store_u64",
    "input_load_u8",
    "input_load_u64",
    "input_length",
    "input_offset",
];

/// The compiled kernel, ready to instantiate into a plugin's stores.
pub(crate) struct Kernel {
    module: Module,
    pre: InstancePre<ExtismState>,
    memory: ModuleExport,
    functions: Vec<ModuleExport>,
}

impl Kernel {
    pub fn new(runtime: &Runtime) -> Result<Kernel> {
        let module = runtime
            .load_module(SOURCE.as_bytes())
            .context("compiling the Extism kernel")?;
        // The kernel imports nothing: a failed check returns 0 or does nothing.
        let linker = Linker::new(runtime.engine());
        let pre = linker
            .instantiate_pre(&module)
            .map_err(anyhow::Error::from)?;
        let export = |name: &str| {
            module
                .get_export_index(name)
                .with_context(|| format!("the kernel exports no `{name}`"))
        };
        Ok(Kernel {
            memory: export("memory")?,
            functions: FUNCTIONS.iter().map(|n| export(n)).collect::<Result<_>>()?,
            pre,
            module,
        })
    }

    fn function_type(&self, index: usize) -> FuncType {
        self.module
            .get_export(FUNCTIONS[index])
            .and_then(|e| e.func().cloned())
            .expect("the kernel exports every accessor as a function")
    }

    /// Whether an import of type `ty` can be given the accessor `index`.
    pub fn accepts(&self, index: usize, ty: &FuncType) -> bool {
        self.function_type(index).matches(ty)
    }

    /// "`function` of type ..." for error messages.
    pub fn describe(&self, index: usize) -> String {
        format!("a function of type {}", self.function_type(index))
    }

    /// Instantiates the kernel into `store` and makes it the store's Extism memory.
    pub async fn instantiate(
        &self,
        store: &mut StoreContextMut<'_, ExtismState>,
    ) -> wasmtime::Result<Instance> {
        // Extism memory is capped by its own allocator (`ExtismMemory::limit`),
        // so the kernel's memory stays out of the linear-memory cap, as the
        // reference runtime caps each memory on its own.
        store.data_mut().limiter.exempt_next_growth();
        let instance = self.pre.instantiate_async(&mut *store).await;
        store.data_mut().limiter.end_exemption();
        let instance = instance?;
        let memory = match instance.get_module_export(&mut *store, &self.memory) {
            Some(Extern::Memory(m)) => m,
            _ => unreachable!("the kernel exports its memory"),
        };
        let size = memory.data_size(&*store) as u64;
        let state = store.data_mut();
        state.kernel_memory = Some(memory);
        state.memory.set_capacity(size);
        sync_header(store);
        Ok(instance)
    }

    /// The kernel's export for `extism:host/env::<FUNCTIONS[index]>`.
    pub fn function(
        &self,
        store: &mut StoreContextMut<'_, ExtismState>,
        instance: &Instance,
        index: usize,
    ) -> Extern {
        instance
            .get_module_export(&mut *store, &self.functions[index])
            .expect("the kernel exports every accessor")
    }
}

/// The kernel memory's bytes and the rest of the store data, borrowed together.
pub(crate) fn split<'a>(
    store: impl Into<StoreContextMut<'a, ExtismState>>,
) -> (&'a mut [u8], &'a mut ExtismState) {
    let store = store.into();
    let memory = store
        .data()
        .kernel_memory
        .expect("the kernel is instantiated before the guest");
    memory.data_and_store_mut(store)
}

/// Rewrites the header the kernel checks bounds against.
pub(crate) fn sync_header(store: &mut StoreContextMut<'_, ExtismState>) {
    let (bytes, state) = split(&mut *store);
    state.memory.write_header(bytes);
}

/// Allocates `n` bytes, growing the kernel's memory when needed; 0 when `n`
/// is 0, the Extism memory limit does not allow it or the memory cannot
/// grow. A block for the guest (`for_guest`) reads as zeros unless it is a
/// reused freed block, as with the reference kernel; the host's own blocks
/// are overwritten at once, so they are not zeroed first.
pub(crate) fn alloc(store: &mut StoreContextMut<'_, ExtismState>, n: u64, for_guest: bool) -> u64 {
    let Some(allocation) = store.data_mut().memory.alloc(n) else {
        return 0;
    };
    if !ensure_capacity(store) {
        store.data_mut().memory.cancel(allocation.offset);
        return 0;
    }
    if for_guest && !allocation.stale.is_empty() {
        let (bytes, _) = split(&mut *store);
        bytes[allocation.stale.start as usize..allocation.stale.end as usize].fill(0);
    }
    allocation.offset
}

/// Grows the kernel's memory to hold every byte in use (and tells the
/// kernel the new end of the data region).
fn ensure_capacity(store: &mut StoreContextMut<'_, ExtismState>) -> bool {
    let needed = store.data().memory.size();
    if needed <= store.data().memory.capacity() {
        return true;
    }
    let memory: Memory = store.data().kernel_memory.expect("kernel instantiated");
    let have = memory.data_size(&*store) as u64;
    let pages = needed.saturating_sub(have).div_ceil(PAGE);
    store.data_mut().limiter.exempt_next_growth();
    let grown = memory.grow(&mut *store, pages).is_ok();
    store.data_mut().limiter.end_exemption();
    let size = memory.data_size(&*store) as u64;
    store.data_mut().memory.set_capacity(size);
    sync_header(store);
    grown
}

/// Allocates a block holding `data`; 0 if it does not fit (or is empty).
pub(crate) fn alloc_bytes(store: &mut StoreContextMut<'_, ExtismState>, data: &[u8]) -> u64 {
    let offset = alloc(store, data.len() as u64, false);
    if offset != 0 {
        let (bytes, _) = split(&mut *store);
        bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
    offset
}

/// The guest's `reset`: forgets every block and zeroes what they held, as
/// the kernel's `reset` does (handles from before it read as zeros).
pub(crate) fn reset(store: &mut StoreContextMut<'_, ExtismState>) {
    let (bytes, state) = split(&mut *store);
    let wipe = state.memory.reset_wiping();
    bytes[wipe].fill(0);
    state.memory.write_header(bytes);
}

/// Frees a block (anything that is not a live block is ignored).
pub(crate) fn free(store: &mut StoreContextMut<'_, ExtismState>, handle: u64) {
    let state = store.data_mut();
    let input = state.memory.input_offset() == handle;
    state.memory.free(handle);
    if input {
        sync_header(store);
    }
}

/// Start of a call: forgets the last call's blocks and copies `input` in.
pub(crate) fn begin_call(
    store: &mut StoreContextMut<'_, ExtismState>,
    input: &[u8],
) -> Result<(), InputTooLarge> {
    store.data_mut().memory.reset();
    if !input.is_empty() {
        let offset = alloc_bytes(store, input);
        if offset == 0 {
            return Err(InputTooLarge {
                len: input.len() as u64,
                limit: store.data().memory.limit(),
            });
        }
        let marked = store
            .data_mut()
            .memory
            .mark_input(offset, input.len() as u64);
        debug_assert!(marked, "a block just allocated is in the data region");
    }
    sync_header(store);
    Ok(())
}

/// Convenience for host functions: a copy of a block, left in place (for
/// functions whose caller keeps its arguments, as with `extism:host/user`).
pub(crate) fn read_block(
    store: &mut StoreContextMut<'_, ExtismState>,
    handle: u64,
) -> Option<Vec<u8>> {
    let (bytes, state) = split(&mut *store);
    Some(state.memory.block(bytes, handle)?.to_vec())
}

/// Convenience for `extism:host/env` functions: a copy of the bytes a guest
/// passed by handle, 0 being the null handle (no bytes), as in the reference
/// host; `None` if the handle is neither 0 nor a live block.
pub(crate) fn read_handle(
    store: &mut StoreContextMut<'_, ExtismState>,
    handle: u64,
) -> Option<Vec<u8>> {
    let (bytes, state) = split(&mut *store);
    Some(state.memory.handle(bytes, handle)?.to_vec())
}

/// Index in [`FUNCTIONS`] of the kernel export that serves `extism:host/env::<name>`.
pub(crate) fn serves(name: &str) -> Option<usize> {
    FUNCTIONS.iter().position(|f| *f == name)
}
