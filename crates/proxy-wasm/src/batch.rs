//! Callbacks the host always makes back to back, made in one guest call.
//!
//! Every guest call from the host runs on a fiber of its own (wasmtime's
//! `call_async`), about a thousand instructions before the guest runs a
//! single one (crates/runtime/examples/call_cost.rs). A stream's
//! `proxy_on_context_create` is always followed by its request-headers
//! callback, and `proxy_on_log`, `proxy_on_done` and `proxy_on_delete` end
//! every stream together; nothing the host does between them is observable
//! to the filter. So each filter instance gets a small module of our own,
//! instantiated in the same store with the filter's exports as its imports,
//! whose two functions make those calls in a row: wasm calling wasm, on
//! the one fiber of the host's call. Deadlines, the slow lane and crash
//! reports see one guest call, as they did when the host made the calls in
//! a row itself (the filter's frames are in the backtrace, under ours).

use anyhow::Result;
use wasmgate_runtime::Runtime;
use wasmtime::{Extern, Instance, Module, Store, TypedFunc};

use crate::exports::Exports;
use crate::state::FilterState;

/// Imports the five callbacks (with the ABI's signatures) and calls them in
/// the order the host would.
const BATCH_WAT: &str = r#"
(module $wasmgate_batch
  (import "filter" "proxy_on_context_create" (func $create (param i32 i32)))
  (import "filter" "proxy_on_request_headers" (func $request_headers (param i32 i32 i32) (result i32)))
  (import "filter" "proxy_on_log" (func $log (param i32)))
  (import "filter" "proxy_on_done" (func $done (param i32) (result i32)))
  (import "filter" "proxy_on_delete" (func $delete (param i32)))
  ;; (context, root context, header count, end of stream) -> action
  (func $create_then_request_headers (export "create_then_request_headers") (param i32 i32 i32 i32) (result i32)
    (call $create (local.get 0) (local.get 1))
    (call $request_headers (local.get 0) (local.get 2) (local.get 3)))
  ;; (context): the host ignores proxy_on_done's answer, as before
  (func $end_of_stream (export "end_of_stream") (param i32)
    (call $log (local.get 0))
    (drop (call $done (local.get 0)))
    (call $delete (local.get 0))))
"#;

/// The batch module, compiled once per runtime (the runtime keeps modules
/// by their hash, so every plugin after the first finds it compiled).
pub(crate) fn module(runtime: &Runtime) -> Result<Module> {
    runtime.load_module(BATCH_WAT.as_bytes())
}

/// The batched calls of one filter instance.
pub(crate) struct Batched {
    /// `proxy_on_context_create`, then `proxy_on_request_headers`.
    pub create_then_request_headers: TypedFunc<(u32, u32, u32, u32), i32>,
    /// `proxy_on_log`, `proxy_on_done`, `proxy_on_delete`.
    pub end_of_stream: TypedFunc<u32, ()>,
}

/// Links the batch module to a filter instance's exports, if the filter has
/// all five of them (every SDK's do); without one of them the host makes
/// the calls one by one, skipping what is missing.
pub(crate) async fn link(
    store: &mut Store<FilterState>,
    module: &Module,
    exports: &Exports,
) -> wasmtime::Result<Option<Batched>> {
    let (Some(request_headers), Some(log), Some(done), Some(delete)) = (
        &exports.request_headers,
        &exports.log,
        &exports.done,
        &exports.delete,
    ) else {
        return Ok(None);
    };
    let imports: [Extern; 5] = [
        (*exports.context_create.func()).into(),
        (*request_headers.func()).into(),
        (*log.func()).into(),
        (*done.func()).into(),
        (*delete.func()).into(),
    ];
    let instance = Instance::new_async(&mut *store, module, &imports).await?;
    Ok(Some(Batched {
        create_then_request_headers: instance
            .get_typed_func(&mut *store, "create_then_request_headers")?,
        end_of_stream: instance.get_typed_func(&mut *store, "end_of_stream")?,
    }))
}
