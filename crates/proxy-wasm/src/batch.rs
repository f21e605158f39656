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
//!
//! A response that comes whole with its head (most do: a small answer, a
//! local `respond`) through a route of one filter meets that filter's
//! response headers, response body and end-of-stream callbacks back to
//! back too, unless one of them does something the host must act on. A
//! second module, [`RESPONSE_WAT`], calls the three in a row and asks the
//! host before each next one ([`go_on`]): a callback that paused, sent a
//! local response, closed the stream, dispatched or cancelled a call, or
//! asked for its instance to be rebuilt ends the batch there, and the host
//! goes on exactly as if it had made that call alone (`stream.rs`,
//! `FilterStream::on_response_whole`). Between the callbacks `go_on` does
//! what the host does between them: the headers are marked sent and the
//! body put in place, then the body is taken out and the stream marked
//! complete. So the filter sees the same calls in the same order with the
//! same values; two guest calls (each a fiber, a budget, a slow-lane
//! check) fewer for every such request.

use anyhow::Result;
use wasmgate_runtime::Runtime;
use wasmtime::{Caller, Extern, Func, Instance, Module, Store, TypedFunc};

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

/// A whole response's callbacks in a row, the host asked before each next
/// one (`host.go_on`, with the step: 1 before the body, 2 before the end).
const RESPONSE_WAT: &str = r#"
(module $wasmgate_batch_response
  (import "filter" "proxy_on_response_headers" (func $response_headers (param i32 i32 i32) (result i32)))
  (import "filter" "proxy_on_response_body" (func $response_body (param i32 i32 i32) (result i32)))
  (import "filter" "proxy_on_log" (func $log (param i32)))
  (import "filter" "proxy_on_done" (func $done (param i32) (result i32)))
  (import "filter" "proxy_on_delete" (func $delete (param i32)))
  (import "host" "go_on" (func $go_on (param i32) (result i32)))
  ;; (context, header count, body size) -> the action of the last stream
  ;; callback that ran (the host knows which from go_on's steps)
  (func (export "response_whole") (param i32 i32 i32) (result i32)
    (local $action i32)
    (local.set $action (call $response_headers (local.get 0) (local.get 1) (i32.const 0)))
    (if (local.get $action) (then (return (local.get $action))))
    (if (i32.eqz (call $go_on (i32.const 1))) (then (return (i32.const 0))))
    (local.set $action (call $response_body (local.get 0) (local.get 2) (i32.const 1)))
    (if (local.get $action) (then (return (local.get $action))))
    (if (i32.eqz (call $go_on (i32.const 2))) (then (return (i32.const 0))))
    (call $log (local.get 0))
    (drop (call $done (local.get 0)))
    (call $delete (local.get 0))
    (i32.const 0)))
"#;

/// The batch modules, compiled once per runtime (the runtime keeps modules
/// by their hash, so every plugin after the first finds them compiled).
pub(crate) struct Modules {
    first: Module,
    response: Module,
}

pub(crate) fn modules(runtime: &Runtime) -> Result<Modules> {
    Ok(Modules {
        first: runtime.load_module(BATCH_WAT.as_bytes())?,
        response: runtime.load_module(RESPONSE_WAT.as_bytes())?,
    })
}

/// The batched calls of one filter instance.
pub(crate) struct Batched {
    /// `proxy_on_context_create`, then `proxy_on_request_headers`.
    pub create_then_request_headers: TypedFunc<(u32, u32, u32, u32), i32>,
    /// `proxy_on_log`, `proxy_on_done`, `proxy_on_delete`.
    pub end_of_stream: TypedFunc<u32, ()>,
    /// A whole response's callbacks (see the module's docs); `None` if the
    /// filter lacks one of them.
    pub response_whole: Option<TypedFunc<(u32, u32, u32), i32>>,
}

/// How far a [`Batched::response_whole`] call went: the host's answers to
/// `go_on`, kept in the store until the call is over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum WholeStep {
    /// Only the headers callback ran (or none: it trapped).
    #[default]
    Headers,
    /// The body callback ran (or trapped) too.
    Body,
    /// The end-of-stream callbacks ran (or one trapped).
    End,
}

/// `host.go_on(step)`: whether the batch may make its next call, and if so
/// what the host does between the two calls.
fn go_on(state: &mut FilterState, step: i32) -> i32 {
    let must_act = state.exchange.local_response.is_some()
        || !state.closed.is_empty()
        || !state.dispatched_calls.is_empty()
        || !state.cancelled_calls.is_empty()
        || state.rebuild_requested;
    if must_act {
        return 0;
    }
    // As before any stream callback (`FilterStream::reset_signals`).
    state.resumed.clear();
    let exchange = &mut state.exchange;
    match step {
        1 => {
            // The headers go out once their callbacks are over: later
            // edits do not reach the client (headers.rs, "frozen").
            exchange.response_headers.freeze();
            exchange.response_body = std::mem::take(&mut state.whole_body);
            state.whole_step = WholeStep::Body;
        }
        _ => {
            // What went through the filter; the stream is over
            // (`FilterStream::finish` marks it before `proxy_on_log`).
            // What `response.size` counts (the chain's body pass does so
            // before the end callbacks when it makes them itself).
            state.whole_body = std::mem::take(&mut exchange.response_body);
            exchange.info.response_body_bytes += state.whole_body.len() as u64;
            exchange.info.complete = true;
            state.whole_step = WholeStep::End;
        }
    }
    1
}

/// Links the batch modules to a filter instance's exports, if the filter
/// has what each calls (every SDK's filters have all of them); without
/// them the host makes the calls one by one, skipping what is missing.
pub(crate) async fn link(
    store: &mut Store<FilterState>,
    modules: &Modules,
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
    let instance = Instance::new_async(&mut *store, &modules.first, &imports).await?;
    let response_whole = match (&exports.response_headers, &exports.response_body) {
        (Some(headers), Some(body)) => {
            let go_on = Func::wrap(
                &mut *store,
                |mut caller: Caller<'_, FilterState>, step: i32| go_on(caller.data_mut(), step),
            );
            let imports: [Extern; 6] = [
                (*headers.func()).into(),
                (*body.func()).into(),
                (*log.func()).into(),
                (*done.func()).into(),
                (*delete.func()).into(),
                go_on.into(),
            ];
            let response = Instance::new_async(&mut *store, &modules.response, &imports).await?;
            Some(response.get_typed_func(&mut *store, "response_whole")?)
        }
        _ => None,
    };
    Ok(Some(Batched {
        create_then_request_headers: instance
            .get_typed_func(&mut *store, "create_then_request_headers")?,
        end_of_stream: instance.get_typed_func(&mut *store, "end_of_stream")?,
        response_whole,
    }))
}
