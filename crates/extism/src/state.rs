//! What each instance's store holds ([`ExtismState`]), and what every
//! instance of a plugin shares through it ([`PluginShared`]: config, vars,
//! limits, grants), which the host functions read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmgate_runtime::limits::HasCallBudget;
use wasmgate_runtime::{CallBudget, MemoryLimiter, PluginStats};
use wasmtime::Memory;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::http::AllowedHosts;
use crate::memory::ExtismMemory;

/// What every instance of a plugin shares.
pub(crate) struct PluginShared {
    pub name: Arc<str>,
    pub config: BTreeMap<String, String>,
    /// Vars belong to the plugin, not to one instance, so every pooled
    /// instance sees the same values (as a single reference-runtime plugin would).
    pub vars: Mutex<BTreeMap<String, Vec<u8>>>,
    pub max_var_bytes: u64,
    pub allowed_hosts: AllowedHosts,
    pub max_http_response_bytes: u64,
    pub allowed_paths: BTreeMap<String, PathBuf>,
    pub memory_limit: Option<u64>,
    pub extism_memory_limit: u64,
    pub timeout: Option<Duration>,
    pub needs_wasi: bool,
    pub stats: Arc<PluginStats>,
    pub services: wasmgate_services::Grants,
}

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
