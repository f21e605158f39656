//! A filter callback that runs long moves to the slow lane
//! (`wasmgate_runtime::slow_lane`) and comes back: its result counts, its
//! instance is reused, and one that overruns its deadline still ends there.
//! (Alone in its test binary: it reads the process-wide count of moved calls.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgate_proxy_wasm::{
    FilterConfig, FilterError, FilterPlugin, HttpExchange, Runtime, RuntimeConfig,
};
use wasmgate_runtime::slow_lane;

use crate::common::bump_allocator;

/// `proxy_on_request_headers` counts to the number in the plugin
/// configuration's first 8 bytes (little-endian; 0 with none) and then adds
/// header `x-counted: yes`.
const MODULE: &str = concat!(
    r#"(module
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $get_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  "#,
    bump_allocator!(1024),
    r#"
  (data (i32.const 16) "x-countedyes")
  (global $count (mut i64) (i64.const 0))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_configure") (param i32) (param $size i32) (result i32)
    (if (i32.ge_u (local.get $size) (i32.const 8))
      (then
        ;; buffer 7 = plugin configuration; the host writes (pointer, size) at 0 and 4
        (drop (call $get_buffer (i32.const 7) (i32.const 0) (i32.const 8) (i32.const 0) (i32.const 4)))
        (global.set $count (i64.load (i32.load (i32.const 0))))))
    (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (local $i i64)
    (block $done (loop $next
      (br_if $done (i64.ge_u (local.get $i) (global.get $count)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $next)))
    (drop (call $add (i32.const 0) (i32.const 16) (i32.const 9) (i32.const 25) (i32.const 3)))
    (i32.const 0))
)"#
);

async fn counting_filter(rt: &Runtime, count: u64, timeout: Duration) -> Arc<FilterPlugin> {
    let config = FilterConfig {
        name: format!("count-{count}"),
        plugin_configuration: count.to_le_bytes().to_vec(),
        timeout: Some(timeout),
        ..FilterConfig::default()
    };
    FilterPlugin::new(rt, MODULE.as_bytes(), config)
        .await
        .unwrap()
}

async fn request_headers(filter: &Arc<FilterPlugin>) -> Result<Box<HttpExchange>, FilterError> {
    let mut exchange = Box::<HttpExchange>::default();
    let mut stream = filter.stream().await?;
    stream.on_request_headers(&mut exchange, true).await?;
    stream.finish(&mut exchange).await?;
    Ok(exchange)
}

fn counted(exchange: &HttpExchange) -> bool {
    exchange
        .request_headers
        .iter()
        .any(|(name, value)| name == b"x-counted" && value == b"yes")
}

#[tokio::test]
async fn long_callbacks_move_to_the_slow_lane_and_come_back() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();

    // A short callback stays on its thread.
    let quick = counting_filter(&rt, 0, Duration::from_secs(5)).await;
    let before = slow_lane::moved_calls();
    assert!(counted(&request_headers(&quick).await.unwrap()));
    assert_eq!(slow_lane::moved_calls(), before);

    // 5e7 iterations (tens of ms): well past the 1 ms after which a call
    // moves, and short enough not to wait long for a lower-priority CPU share.
    let long = counting_filter(&rt, 50_000_000, Duration::from_secs(30)).await;
    for round in 1..=2 {
        let exchange = request_headers(&long).await.unwrap();
        assert!(
            counted(&exchange),
            "round {round}: the callback's header is missing"
        );
        assert_eq!(slow_lane::moved_calls(), before + round, "round {round}");
    }
    // The instance came back with its store and served the second request.
    assert_eq!(long.status().created, 1);
    assert_eq!(long.status().discarded, 0);

    // A callback that overruns its deadline on the slow lane ends there.
    let endless = counting_filter(&rt, u64::MAX, Duration::from_millis(300)).await;
    let started = Instant::now();
    match request_headers(&endless).await {
        Err(FilterError::Crash(report)) => assert_eq!(report.kind.as_str(), "timeout"),
        other => panic!("expected a timeout, got {:?}", other.map(|_| ())),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // And the plugin serves the next request with a fresh instance.
    assert!(matches!(
        request_headers(&endless).await,
        Err(FilterError::Crash(_))
    ));
    assert_eq!(endless.status().created, 2);
}
