//! Values the host hands to the guest (headers, properties, shared data)
//! go through the guest's allocator, which the host's giving module calls
//! after the host function returns (src/giving.rs). What the guest sees
//! must be what the ABI says: one allocation per non-empty value, of its
//! size; nothing allocated for an empty or a missing value; the outs
//! written; and an allocator that itself asks the host for a value (found
//! or not) does not disturb the value it is allocating for.

use std::sync::Arc;

use wasmgate_proxy_wasm::{FilterConfig, FilterError, FilterPlugin, HttpExchange, Runtime};

use crate::common::{filter_from_wat, headers_then_finish, pairs};

/// `proxy_on_request_headers` reads `:path` (present), `x-empty` (empty)
/// and `x-missing` (absent), and `plugin_name`; every check that fails
/// traps. Its allocator records each size it is asked for, and with the
/// configuration "nested" first looks `x-missing` and then `:path` up
/// itself, once. The record is published as the property `sizes`.
const MODULE: &str = r#"(module
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_property" (func $set_property (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 8192))
  (global $nested (mut i32) (i32.const 0))
  (global $inside (mut i32) (i32.const 0))
  (global $sizes (mut i32) (i32.const 0))
  (data (i32.const 1024) ":path")
  (data (i32.const 1040) "x-empty")
  (data (i32.const 1056) "x-missing")
  (data (i32.const 1072) "plugin_name")
  (data (i32.const 1088) "sizes")
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_configure") (param i32) (param $size i32) (result i32)
    (global.set $nested (i32.eq (local.get $size) (i32.const 6)))
    (i32.const 1))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    ;; Sizes as one byte each at 2048.
    (i32.store8 (i32.add (i32.const 2048) (global.get $sizes)) (local.get $n))
    (global.set $sizes (i32.add (global.get $sizes) (i32.const 1)))
    (if (i32.and (global.get $nested) (i32.eqz (global.get $inside)))
      (then
        (global.set $inside (i32.const 1))
        (if (i32.ne (call $get (i32.const 0) (i32.const 1056) (i32.const 9) (i32.const 200) (i32.const 204)) (i32.const 1))
          (then unreachable))
        (if (i32.ne (call $get (i32.const 0) (i32.const 1024) (i32.const 5) (i32.const 208) (i32.const 212)) (i32.const 0))
          (then unreachable))
        (if (i32.ne (i32.load (i32.const 212)) (i32.const 7)) (then unreachable))))
    (local.set $p (global.get $bump))
    (global.set $bump (i32.add (global.get $bump) (local.get $n)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func $expect_path (param $ptr i32) (param $len i32)
    (if (i32.ne (i32.load (local.get $len)) (i32.const 7)) (then unreachable))
    ;; "/a/b?c=" starts "/a/b"
    (if (i32.ne (i32.load (i32.load (local.get $ptr))) (i32.const 0x622f612f)) (then unreachable)))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (global.set $sizes (i32.const 0))
    (global.set $inside (i32.const 0))
    ;; A present value: OK, allocated, copied.
    (if (i32.ne (call $get (i32.const 0) (i32.const 1024) (i32.const 5) (i32.const 100) (i32.const 104)) (i32.const 0))
      (then unreachable))
    (call $expect_path (i32.const 100) (i32.const 104))
    ;; An empty value: OK, a null pointer and a zero length, no allocation.
    (i32.store (i32.const 108) (i32.const -1))
    (i32.store (i32.const 112) (i32.const -1))
    (if (i32.ne (call $get (i32.const 0) (i32.const 1040) (i32.const 7) (i32.const 108) (i32.const 112)) (i32.const 0))
      (then unreachable))
    (if (i32.or (i32.load (i32.const 108)) (i32.load (i32.const 112))) (then unreachable))
    ;; A missing value: NotFound, nothing written.
    (i32.store (i32.const 116) (i32.const 77))
    (if (i32.ne (call $get (i32.const 0) (i32.const 1056) (i32.const 9) (i32.const 116) (i32.const 120)) (i32.const 1))
      (then unreachable))
    (if (i32.ne (i32.load (i32.const 116)) (i32.const 77)) (then unreachable))
    ;; A property.
    (if (i32.ne (call $property (i32.const 1072) (i32.const 11) (i32.const 124) (i32.const 128)) (i32.const 0))
      (then unreachable))
    (if (i32.ne (i32.load (i32.const 128)) (i32.const 5)) (then unreachable))
    (drop (call $set_property (i32.const 1088) (i32.const 5) (i32.const 2048) (global.get $sizes)))
    (i32.const 0))
)"#;

async fn plugin(rt: &Runtime, conf: &str) -> Arc<FilterPlugin> {
    let config = FilterConfig {
        name: "giver".into(),
        plugin_configuration: conf.as_bytes().to_vec(),
        ..FilterConfig::default()
    };
    filter_from_wat(rt, MODULE, config).await
}

async fn request_headers(filter: &Arc<FilterPlugin>) -> Result<Box<HttpExchange>, FilterError> {
    headers_then_finish(filter, pairs(&[(":path", "/a/b?c="), ("x-empty", "")])).await
}

fn sizes(exchange: &HttpExchange) -> Vec<u8> {
    exchange.properties[&b"sizes"[..]].clone()
}

#[tokio::test]
async fn values_go_through_the_allocator_as_the_abi_says() {
    let rt = Runtime::new(Default::default()).unwrap();
    let filter = plugin(&rt, "").await;
    for _ in 0..3 {
        let exchange = request_headers(&filter).await.unwrap();
        // `:path` (7 bytes) and `plugin_name` ("giver", 5): nothing for the
        // empty or the missing header.
        assert_eq!(sizes(&exchange), [7, 5]);
    }
}

#[tokio::test]
async fn an_allocator_that_asks_the_host_for_values_gets_its_own() {
    let rt = Runtime::new(Default::default()).unwrap();
    let filter = plugin(&rt, "nested").await;
    for _ in 0..2 {
        let exchange = request_headers(&filter).await.unwrap();
        // The first allocation (for `:path`) looks up a missing header, then
        // `:path` again, which allocates (7) inside it; then `plugin_name`.
        assert_eq!(sizes(&exchange), [7, 7, 5]);
    }
    assert_eq!(filter.status().discarded, 0);
}

#[tokio::test]
async fn a_module_may_not_import_the_hosts_giving_functions_itself() {
    let rt = Runtime::new(Default::default()).unwrap();
    let module = MODULE.replace(
        r#"(import "env" "proxy_get_property""#,
        r#"(import "wasmgate:giving" "proxy_get_property""#,
    );
    let error = FilterPlugin::new(&rt, module.as_bytes(), FilterConfig::default())
        .await
        .err()
        .expect("the module must be refused");
    let message = format!("{error:#}");
    assert!(message.contains("wasmgate's own"), "{message}");
}
