//! What each instance's store holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmgate_runtime::limits::HasCallBudget;
use wasmgate_runtime::{CallBudget, MemoryLimiter};
use wasmtime::Memory;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::memory::ExtismMemory;
use crate::plugin::PluginShared;

/// Store data of one Extism instance.
pub struct ExtismState {
    pub(crate) plugin: Arc<PluginShared>,
    pub(crate) memory: ExtismMemory,
    /// The kernel instance's memory, which holds the Extism memory's bytes.
    pub(crate) kernel_memory: Option<Memory>,
    pub(crate) http_status: u16,
    pub(crate) http_headers: Option<BTreeMap<String, String>>,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) budget: CallBudget,
    pub(crate) wasi: Option<WasiP1Ctx>,
}

impl ExtismState {
    pub(crate) fn new(plugin: Arc<PluginShared>, wasi: Option<WasiP1Ctx>) -> ExtismState {
        ExtismState {
            memory: ExtismMemory::new(plugin.extism_memory_limit),
            kernel_memory: None,
            limiter: MemoryLimiter::new(plugin.memory_limit.map(|b| b as usize))
                .counted_in(plugin.stats.clone()),
            plugin,
            http_status: 0,
            http_headers: None,
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

impl HasCallBudget for ExtismState {
    fn call_budget(&mut self) -> &mut CallBudget {
        &mut self.budget
    }
    fn plugin_name(&self) -> &str {
        &self.plugin.name
    }
}
