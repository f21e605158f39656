//! The callbacks the host makes back to back (`proxy_on_context_create` and
//! the request's headers; `proxy_on_log`, `proxy_on_done`,
//! `proxy_on_delete`) run as one guest call where the filter exports them
//! all (src/batch.rs). A filter must not be able to tell: the same
//! callbacks, in the same order, with the same arguments, with or without
//! the batch; a trap or a deadline in the middle still ends the call with a
//! report and a replaced instance.

use std::sync::Arc;
use std::time::Duration;

use wasmgate_proxy_wasm::{
    FilterConfig, FilterError, FilterPlugin, HttpExchange, Runtime, RuntimeConfig,
};

use crate::common::{bump_allocator, filter_from_wat, headers_then_finish, pairs};

/// Appends a letter per stream callback to a trace, checks every argument
/// (a wrong one traps), and publishes the trace as the property `trace` in
/// `proxy_on_delete`. The plugin configuration's size picks a fault:
/// 1 traps in `proxy_on_done`, 2 spins in `proxy_on_delete`.
const MODULE: &str = concat!(
    r#"(module
  (import "env" "proxy_set_property" (func $set_property (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  "#,
    bump_allocator!(4096),
    r#"
  (global $len (mut i32) (i32.const 0))
  (global $stream (mut i32) (i32.const 0))
  (global $mode (mut i32) (i32.const 0))
  (data (i32.const 1024) "trace")
  (func (export "proxy_abi_version_0_2_1"))
  (func $record (param $letter i32)
    (i32.store8 (i32.add (i32.const 256) (global.get $len)) (local.get $letter))
    (global.set $len (i32.add (global.get $len) (i32.const 1))))
  (func $check_stream (param $ctx i32)
    (if (i32.ne (local.get $ctx) (global.get $stream)) (then unreachable)))
  (func (export "proxy_on_configure") (param i32) (param $size i32) (result i32)
    (global.set $mode (local.get $size))
    (i32.const 1))
  (func (export "proxy_on_context_create") (param $ctx i32) (param $parent i32)
    (if (i32.eq (local.get $ctx) (i32.const 1)) (then (return)))
    (if (i32.ne (local.get $parent) (i32.const 1)) (then unreachable))
    (global.set $stream (local.get $ctx))
    (global.set $len (i32.const 0))
    (call $record (i32.const 99)))
  (func (export "proxy_on_request_headers") (param $ctx i32) (param $count i32) (param $eos i32) (result i32)
    (call $check_stream (local.get $ctx))
    (if (i32.ne (local.get $count) (i32.const 2)) (then unreachable))
    (if (i32.ne (local.get $eos) (i32.const 1)) (then unreachable))
    (call $record (i32.const 104))
    (i32.const 0))
  (func (export "proxy_on_log") (param $ctx i32)
    (call $check_stream (local.get $ctx))
    (call $record (i32.const 108)))
  (func (export "PROXY_ON_DONE") (param $ctx i32) (result i32)
    (call $check_stream (local.get $ctx))
    (if (i32.eq (global.get $mode) (i32.const 1)) (then unreachable))
    (call $record (i32.const 100))
    (i32.const 1))
  (func (export "proxy_on_delete") (param $ctx i32)
    (call $check_stream (local.get $ctx))
    (if (i32.eq (global.get $mode) (i32.const 2)) (then (loop $spin (br $spin))))
    (call $record (i32.const 120))
    (drop (call $set_property (i32.const 1024) (i32.const 5) (i32.const 256) (global.get $len))))
)"#
);

/// The module with `proxy_on_done` (batched) or without it (the host makes
/// the calls one by one).
fn module(with_done: bool) -> String {
    let done = if with_done {
        "proxy_on_done"
    } else {
        "not_an_export"
    };
    MODULE.replace("PROXY_ON_DONE", done)
}

async fn plugin(rt: &Runtime, with_done: bool, fault: &str) -> Arc<FilterPlugin> {
    let config = FilterConfig {
        name: format!("batched-{with_done}-{}", fault.len()),
        plugin_configuration: fault.as_bytes().to_vec(),
        timeout: Some(Duration::from_millis(200)),
        ..FilterConfig::default()
    };
    filter_from_wat(rt, &module(with_done), config).await
}

/// One request through the filter: its headers, then the end of the stream.
async fn one_request(filter: &Arc<FilterPlugin>) -> Result<Box<HttpExchange>, FilterError> {
    headers_then_finish(filter, pairs(&[(":path", "/"), (":method", "GET")])).await
}

fn trace(exchange: &HttpExchange) -> &str {
    std::str::from_utf8(&exchange.properties[&b"trace"[..]]).unwrap()
}

#[tokio::test]
async fn the_same_callbacks_in_the_same_order_with_or_without_the_batch() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let batched = plugin(&rt, true, "").await;
    let one_by_one = plugin(&rt, false, "").await;
    // Several requests per instance: context ids move on, and a trace left
    // by the previous stream must not leak into the next.
    for _ in 0..3 {
        let exchange = one_request(&batched).await.unwrap();
        assert_eq!(trace(&exchange), "chldx");
        let exchange = one_request(&one_by_one).await.unwrap();
        assert_eq!(trace(&exchange), "chlx");
    }
    assert_eq!(batched.status().discarded, 0);
    assert_eq!(batched.stats().snapshot().traps, 0);
}

#[tokio::test]
async fn a_trap_inside_the_batch_ends_it_and_replaces_the_instance() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let filter = plugin(&rt, true, "t").await;
    for round in 1..=2 {
        let Err(FilterError::Crash(report)) = one_request(&filter).await else {
            panic!("proxy_on_done traps, so the stream's end must fail");
        };
        assert_eq!(report.kind.as_str(), "trap");
        assert!(report.message.contains("unreachable"), "{}", report.message);
        // The filter's own function is in the backtrace, under the batch's.
        assert!(
            report
                .frames
                .iter()
                .any(|f| f.function.contains("end_of_stream")),
            "{:?}",
            report.frames
        );
        assert_eq!(filter.status().discarded, round);
    }
}

#[tokio::test]
async fn a_spin_inside_the_batch_ends_at_the_deadline() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let filter = plugin(&rt, true, "ss").await;
    let started = std::time::Instant::now();
    let Err(FilterError::Crash(report)) = one_request(&filter).await else {
        panic!("proxy_on_delete spins, so the stream's end must fail");
    };
    assert_eq!(report.kind.as_str(), "timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(filter.status().discarded, 1);
    // The plugin keeps serving with a fresh instance (which spins again:
    // its configuration asks it to).
    assert!(one_request(&filter).await.is_err());
}
