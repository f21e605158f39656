//! An instance's start-up has a deadline of its own (`startup_timeout_ms`,
//! 60 s unless the plugin says), apart from its callbacks' (`timeout_ms`):
//! heavy filters (Higress's WAF with the OWASP CRS) take far longer to
//! start than any request may take.

use std::time::Duration;

use wasmgate_proxy_wasm::{FilterConfig, FilterPlugin, Runtime, RuntimeConfig};

use crate::common::bump_allocator;

/// `proxy_on_vm_start` counts to 300 million (a few hundred milliseconds)
/// before it says yes.
const SLOW_START: &str = concat!(
    r#"(module
  (memory (export "memory") 1)
  "#,
    bump_allocator!(1024),
    r#"
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (local $i i64)
    (loop $count
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $count (i64.lt_u (local.get $i) (i64.const 300000000))))
    (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
)"#
);

async fn start(startup_timeout: Option<Duration>) -> Result<(), String> {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let config = FilterConfig {
        name: "slow-start".into(),
        // A callback's deadline far below the start-up's time: it is not
        // the one that applies.
        timeout: Some(Duration::from_millis(10)),
        startup_timeout,
        ..FilterConfig::default()
    };
    FilterPlugin::new(&rt, SLOW_START.as_bytes(), config)
        .await
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
}

#[tokio::test]
async fn start_up_has_its_own_deadline() {
    // The default (60 s) lets the slow start finish, 10 ms callbacks or not.
    start(None).await.unwrap();
    // A deadline shorter than the start fails it, naming start-up.
    let why = start(Some(Duration::from_millis(20))).await.unwrap_err();
    assert!(why.contains("start-up"), "{why}");
    assert!(why.contains("slow-start"), "{why}");
}
