//! A hand-written Proxy-Wasm module that passes the host bad pointers and
//! malformed maps: the callback fails with a report naming the host function,
//! the instance is replaced, and the host keeps serving.

use wasmgate_proxy_wasm::{FilterConfig, FilterError, FilterPlugin, Runtime, RuntimeConfig};

use crate::common::{bump_allocator, filter_from_wat, headers_then_finish};

/// The plugin configuration's size picks the attack made in
/// `proxy_on_request_headers`: 1 a key pointer past the end of memory,
/// 2 a header map whose pair count exceeds its bytes, 0 none.
const MODULE: &str = concat!(
    r#"(module
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_header_map_pairs" (func $set_pairs (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  "#,
    bump_allocator!(1024),
    r#"
  (global $mode (mut i32) (i32.const 0))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_configure") (param i32) (param $size i32) (result i32)
    (global.set $mode (local.get $size))
    (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (if (i32.eq (global.get $mode) (i32.const 1))
      (then (drop (call $get (i32.const 0) (i32.const 65530) (i32.const 100) (i32.const 0) (i32.const 4)))))
    (if (i32.eq (global.get $mode) (i32.const 2))
      (then
        (i32.store (i32.const 0) (i32.const 1000000))
        (drop (call $set_pairs (i32.const 0) (i32.const 0) (i32.const 12)))))
    (i32.const 0))
)"#
);

async fn plugin(rt: &Runtime, conf: &str) -> std::sync::Arc<FilterPlugin> {
    let config = FilterConfig {
        name: format!("hostile-{}", conf.len()),
        plugin_configuration: conf.as_bytes().to_vec(),
        ..FilterConfig::default()
    };
    filter_from_wat(rt, MODULE, config).await
}

async fn request_headers(filter: &std::sync::Arc<FilterPlugin>) -> Result<(), FilterError> {
    headers_then_finish(filter, Default::default())
        .await
        .map(drop)
}

#[tokio::test]
async fn bad_pointers_and_maps_fail_only_that_callback() {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let (bad_key, bad_map, fine) = (
        plugin(&rt, "k").await,
        plugin(&rt, "mm").await,
        plugin(&rt, "").await,
    );

    for (filter, expected) in [
        (
            &bad_key,
            "proxy_get_header_map_value: guest range 65530+100 is outside its 65536-byte memory",
        ),
        (&bad_map, "malformed header map: more pairs than bytes"),
    ] {
        for _ in 0..2 {
            let Err(FilterError::Crash(report)) = request_headers(filter).await else {
                panic!("{} should fail", filter.name());
            };
            assert_eq!(report.function, "proxy_on_request_headers");
            assert!(report.message.contains(expected), "{}", report.message);
        }
        let status = filter.status();
        assert_eq!(
            status.discarded, 2,
            "failed instances are dropped: {status:?}"
        );
        assert_eq!(status.created, 2, "and replaced: {status:?}");
    }
    request_headers(&fine).await.unwrap();
}
