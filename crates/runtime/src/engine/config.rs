//! How an engine is built ([`RuntimeConfig`]) and whether it loads
//! precompiled artifacts ([`PrecompiledPolicy`]).

use std::path::PathBuf;
use std::time::Duration;

/// How the engine is built. Every field has a default suited to a server.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Directory for precompiled modules; `None` compiles in memory every time.
    pub cache_dir: Option<PathBuf>,
    /// Use the pooling instance allocator (falls back to on-demand allocation
    /// when the pool's virtual-memory reservation cannot be made).
    pub pooling: bool,
    /// Plugin instances the pool can hold at once, across all plugins. Each
    /// gets a fiber stack, up to three core instances, two linear memories
    /// and two tables (see `build_engine`). Default 1000.
    pub pool_slots: u32,
    /// Largest linear memory any instance may have, in bytes. Per-plugin caps
    /// are lower and enforced by [`crate::MemoryLimiter`]. Default 4 GiB (all of wasm32).
    pub max_memory_bytes: u64,
    /// Period of the epoch ticker: the granularity of deadlines and of the
    /// yields of long calls (a quarter of it while long calls run, see
    /// `ticker`). Default 1 ms.
    pub epoch_tick: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            pooling: true,
            pool_slots: 1000,
            max_memory_bytes: 4 << 30,
            epoch_tick: Duration::from_millis(1),
        }
    }
}

/// Whether a precompiled artifact (a `.cwasm` from `wasmgate compile`) may
/// be loaded. An artifact is native code: wasmtime maps and runs it without
/// verifying it (its docs: deserialize only trusted bytes), so whoever can
/// supply one runs code outside the sandbox. It is therefore accepted only
/// from a file the operator names with an explicit setting
/// (`allow_precompiled: true`, `--allow-precompiled`); bytes from anywhere
/// else (the admin API, etcd, a URL, inline data) must be wasm, which is
/// validated and compiled here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrecompiledPolicy {
    /// Only wasm (binary or text); an artifact is refused with the reason.
    #[default]
    Refused,
    /// An artifact made by this wasmgate version is loaded as it is.
    Allowed,
}
