//! The wasmtime side of wasmgate, shared by every plugin ABI (Extism,
//! Proxy-Wasm, `wasi:http` components).
//!
//! One [`Runtime`] owns one wasmtime [`Engine`](wasmtime::Engine): Cranelift,
//! epoch interruption driven by a single ticker thread, and the pooling
//! allocator (with an on-demand fallback where the virtual-memory reservation
//! fails). Around it:
//!
//! - [`cache`]: compiled modules cached on disk, keyed by content hash and
//!   engine compatibility, verified before they are loaded.
//! - [`limits`]: per-store memory caps ([`MemoryLimiter`]) and call deadlines
//!   ([`CallBudget`]) that yield to the async executor instead of occupying a
//!   thread, and interrupt a call that overruns.
//! - [`pool`]: bounded per-plugin instance pools that never hand one instance
//!   to two calls, with an isolation mode and crash-loop backoff.
//! - [`crash`]: turning a failed call into a [`CrashReport`] with the trap kind
//!   and the wasm backtrace (function names, file:line from DWARF).
//! - [`profiler`]: sampling CPU profiles of guest code on the epoch ticker.
//! - [`slow_lane`]: calls that run long move off their worker thread to
//!   low-priority threads, so they do not delay other requests.
//! - [`stats`]: per-plugin call counts, latency, failures and memory.
//! - `ticker`: the epoch ticker, which rests while no guest code runs.
//!
//! The ABI crates build their own `Linker`s and store data on top of this.

pub mod cache;
pub mod call_clock;
pub mod crash;
mod engine;
pub mod guest_log;
pub mod limits;
pub mod log_level;
pub mod pool;
pub mod profiler;
pub mod slow_lane;
pub mod stats;
mod ticker;
pub mod wasi;

pub use crash::{CrashReport, FailureKind, Frame};
pub use engine::{is_component, PrecompiledPolicy, Runtime, RuntimeConfig};
pub use limits::{CallBudget, MemoryLimiter};
pub use pool::{AcquireError, InstancePool, Lease, PoolConfig, PoolStats};
pub use stats::{HistogramSnapshot, LastCrash, LatencyHistogram, PluginStats, StatsSnapshot};
pub use wasmtime;
