//! Host functions an embedder adds for its plugins (`extism:host/user` by
//! default), with access to the calling plugin's Extism memory.

use std::sync::Arc;

use wasmtime::{AsContextMut, Caller, FuncType, Linker, StoreContextMut, Val, ValType};

use crate::kernel;
use crate::state::ExtismState;

/// The plugin a host function was called from.
pub struct CurrentPlugin<'a> {
    store: StoreContextMut<'a, ExtismState>,
}

impl CurrentPlugin<'_> {
    /// Bytes of the Extism memory block at `handle` (what a PDK passes for a `Vec<u8>`/`String`).
    pub fn block(&mut self, handle: u64) -> anyhow::Result<&[u8]> {
        let (bytes, state) = kernel::split(&mut self.store);
        state
            .memory
            .block(bytes, handle)
            .ok_or_else(|| anyhow::anyhow!("{handle} is not an Extism memory block"))
    }

    /// Copies `data` into a new block and returns its handle for the guest.
    pub fn new_block(&mut self, data: &[u8]) -> anyhow::Result<u64> {
        match kernel::alloc_bytes(&mut self.store, data) {
            0 if !data.is_empty() => anyhow::bail!("out of Extism memory for {} bytes", data.len()),
            handle => Ok(handle),
        }
    }

    /// Frees a block the guest handed over.
    pub fn free(&mut self, handle: u64) {
        self.store.data_mut().memory.free(handle);
        kernel::sync_header(&mut self.store);
    }

    pub fn plugin_name(&self) -> &str {
        &self.store.data().plugin.name
    }

    pub fn config(&self, key: &str) -> Option<&str> {
        self.store.data().plugin.config.get(key).map(String::as_str)
    }
}

type Callback =
    dyn Fn(&mut CurrentPlugin<'_>, &[Val], &mut [Val]) -> anyhow::Result<()> + Send + Sync;

/// A function the host offers to plugins.
#[derive(Clone)]
pub struct HostFunction {
    namespace: String,
    name: String,
    params: Vec<ValType>,
    results: Vec<ValType>,
    callback: Arc<Callback>,
}

impl HostFunction {
    /// A function in `extism:host/user`. Handles are passed as `ValType::I64`.
    pub fn new(
        name: impl Into<String>,
        params: impl IntoIterator<Item = ValType>,
        results: impl IntoIterator<Item = ValType>,
        callback: impl Fn(&mut CurrentPlugin<'_>, &[Val], &mut [Val]) -> anyhow::Result<()>
            + Send
            + Sync
            + 'static,
    ) -> HostFunction {
        HostFunction {
            namespace: "extism:host/user".to_string(),
            name: name.into(),
            params: params.into_iter().collect(),
            results: results.into_iter().collect(),
            callback: Arc::new(callback),
        }
    }

    /// Puts the function in another import module.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> HostFunction {
        self.namespace = namespace.into();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn define(&self, linker: &mut Linker<ExtismState>) -> anyhow::Result<()> {
        let ty = FuncType::new(linker.engine(), self.params.clone(), self.results.clone());
        let callback = self.callback.clone();
        let name = self.name.clone();
        linker
            .func_new(
                &self.namespace,
                &self.name,
                ty,
                move |mut caller: Caller<'_, ExtismState>, args, results| {
                    let mut current = CurrentPlugin {
                        store: caller.as_context_mut(),
                    };
                    callback(&mut current, args, results).map_err(|e| {
                        wasmtime::Error::from_anyhow(e.context(format!("host function {name}")))
                    })
                },
            )
            .map_err(anyhow::Error::from)?;
        Ok(())
    }
}
