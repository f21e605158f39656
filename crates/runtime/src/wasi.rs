//! WASI for plugins of either ABI: preview 1 (`wasi_snapshot_preview1`) and
//! its predecessor, snapshot 0 (`wasi_unstable`), which older toolchains
//! still emit (AssemblyScript 0.14 with `@solo-io/proxy-runtime` imports
//! `wasi_unstable::proc_exit`; Envoy accepts both). Both are served from one
//! context, with the same grants: wasmtime-wasi implements snapshot 0 over
//! preview 1, converting the few structures whose layout differs (`filestat`,
//! `whence`, clock subscriptions).

use wasmtime::{Linker, Module};
use wasmtime_wasi::p1::WasiP1Ctx;

pub const PREVIEW1: &str = "wasi_snapshot_preview1";
pub const SNAPSHOT0: &str = "wasi_unstable";

/// Whether `module` imports either WASI snapshot (and so needs a context).
pub fn imports_wasi(module: &Module) -> bool {
    module
        .imports()
        .any(|i| i.module() == PREVIEW1 || i.module() == SNAPSHOT0)
}

/// Whether `module` is a WASI import module name.
pub fn is_wasi_module(name: &str) -> bool {
    name == PREVIEW1 || name == SNAPSHOT0
}

/// Links both snapshots, served by the context `ctx` returns.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    ctx: impl Fn(&mut T) -> &mut WasiP1Ctx + Copy + Send + Sync + 'static,
) -> wasmtime::Result<()> {
    wasmtime_wasi::p1::add_to_linker_async(linker, ctx)?;
    wasmtime_wasi::p0::add_to_linker_async(linker, ctx)?;
    // proc_exit of our own, for both snapshots: wasmtime-wasi turns a status
    // of 126 or more into "exit with invalid exit status outside of
    // [0..126)", which hides what happened; AssemblyScript's abort, for one,
    // exits with 255. Every status ends the call as an `I32Exit`, which the
    // ABIs report as the plugin's exit with that status.
    linker.allow_shadowing(true);
    for module in [PREVIEW1, SNAPSHOT0] {
        linker.func_wrap(module, "proc_exit", |status: i32| -> wasmtime::Result<()> {
            Err(wasmtime_wasi::I32Exit(status).into())
        })?;
    }
    linker.allow_shadowing(false);
    Ok(())
}
