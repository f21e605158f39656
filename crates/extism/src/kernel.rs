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
    Caller, Extern, FuncType, Instance, InstancePre, Linker, Memory, Module, ModuleExport,
    StoreContextMut,
};

use crate::memory::InputTooLarge;
use crate::state::ExtismState;

const SOURCE: &str = include_str!("kernel.wat");
const IMPORT_MODULE: &str = "wasmgate:kernel";
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
        let mut linker = Linker::new(runtime.engine());
        linker
            .func_wrap(
                IMPORT_MODULE,
                "out_of_bounds",
                |c: Caller<'_, ExtismState>, code: i32, offset: u64, width: u64| {
                    let error = c.data().memory.out_of_bounds(code, offset, width);
                    Err::<(), _>(wasmtime::Error::from(error))
                },
            )
            .map_err(anyhow::Error::from)?;
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
        store.data_mut().kernel_memory = Some(memory);
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

/// Allocates `n` bytes, growing the kernel's memory when needed; 0 when the
/// Extism memory limit does not allow it or the memory cannot grow.
pub(crate) fn alloc(store: &mut StoreContextMut<'_, ExtismState>, n: u64) -> u64 {
    let offset = store.data_mut().memory.alloc(n);
    if offset != 0 && !ensure_capacity(store) {
        store.data_mut().memory.free(offset);
        return 0;
    }
    sync_header(store);
    offset
}

/// Grows the kernel's memory to hold every byte in use.
fn ensure_capacity(store: &mut StoreContextMut<'_, ExtismState>) -> bool {
    let memory: Memory = store.data().kernel_memory.expect("kernel instantiated");
    let needed = store.data().memory.size();
    let have = memory.data_size(&*store) as u64;
    if needed <= have {
        return true;
    }
    let pages = (needed - have).div_ceil(PAGE);
    store.data_mut().limiter.exempt_next_growth();
    let grown = memory.grow(&mut *store, pages).is_ok();
    store.data_mut().limiter.end_exemption();
    grown
}

/// Allocates a block holding `data`; 0 if it does not fit.
pub(crate) fn alloc_bytes(store: &mut StoreContextMut<'_, ExtismState>, data: &[u8]) -> u64 {
    let offset = alloc(store, data.len() as u64);
    if offset != 0 {
        let (bytes, _) = split(&mut *store);
        bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
    offset
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
        let state = store.data_mut();
        state
            .memory
            .mark_input(offset, input.len() as u64)
            .expect("a block just allocated is in bounds");
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

/// Convenience for host functions: reads a block and frees it.
pub(crate) fn take_block(
    store: &mut StoreContextMut<'_, ExtismState>,
    handle: u64,
) -> Option<Vec<u8>> {
    let (bytes, state) = split(&mut *store);
    let data = state.memory.block(bytes, handle)?.to_vec();
    state.memory.free(handle);
    sync_header(store);
    Some(data)
}

/// Index in [`FUNCTIONS`] of the kernel export that serves `extism:host/env::<name>`.
pub(crate) fn serves(name: &str) -> Option<usize> {
    FUNCTIONS.iter().position(|f| *f == name)
}
