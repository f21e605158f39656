//! The Extism host ABI on the wasmgate runtime.
//!
//! Plugins built with the official Extism PDKs import their host functions
//! from `extism:host/env`; this crate provides every one of them
//! ([`host_env`]), keeps Extism memory in a small per-instance wasm kernel
//! whose bookkeeping the host does ([`memory`]), reads the
//! manifest format ([`manifest`]), and runs calls through a pool of instances
//! ([`Plugin`]). Results and error messages follow the reference runtime
//! (the `extism` crate) so the same plugin behaves the same under both.
//!
//! The life of a call, in [`Plugin::call`]: lease an instance from the pool
//! (creating and initialising one if none is idle), reset its Extism memory
//! and copy the input in, start the deadline, call the export, then read the
//! output or the error. A trap, timeout or memory-cap failure discards the
//! instance; everything else returns it to the pool.

mod error;
pub mod host_env;
mod host_function;
mod http;
mod kernel;
pub mod manifest;
pub mod memory;
mod plugin;
pub mod services;
mod state;
mod wasi;

pub use error::CallError;
pub use host_function::{CurrentPlugin, HostFunction};
pub use manifest::Manifest;
pub use plugin::{Plugin, PluginOptions, PluginStatus};
pub use wasmgate_runtime::{PoolConfig, PrecompiledPolicy, Runtime, RuntimeConfig};
