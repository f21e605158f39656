//! Proxy-Wasm filters built from source with the official Rust SDK
//! (`plugins/proxy-wasm/rust`, by `plugins/build.sh`), driven through the
//! stream API: what the gateway does for each request.

use std::path::PathBuf;

use http::header::{HeaderMap, HeaderValue};
use wasmgate_proxy_wasm::{
    AbiVersion, FilterConfig, FilterPlugin, Flow, Headers, HttpExchange, PoolConfig, Runtime,
    RuntimeConfig,
};

fn wasm(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run plugins/build.sh)", path.display()))
}

fn config(name: &str, conf: &str) -> FilterConfig {
    FilterConfig {
        name: name.to_string(),
        plugin_configuration: conf.as_bytes().to_vec(),
        pool: PoolConfig::default(),
        ..FilterConfig::default()
    }
}

fn request(path: &str) -> Box<HttpExchange> {
    let pairs = |items: &[(&str, &str)]| {
        Headers::from_pairs(
            items
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        )
    };
    Box::new(HttpExchange {
        request_headers: pairs(&[
            (":method", "GET"),
            (":path", path),
            (":authority", "example.com"),
            (":scheme", "http"),
            ("user-agent", "test"),
        ]),
        response_headers: pairs(&[(":status", "200"), ("content-length", "0")]),
        ..HttpExchange::default()
    })
}

fn header<'a>(map: &'a Headers, name: &str) -> Option<&'a str> {
    map.get(name.as_bytes())
        .map(|v| std::str::from_utf8(v).unwrap())
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).unwrap()
}

#[tokio::test]
async fn rust_sdk_header_filter_edits_both_directions() {
    header_filter_edits_both_directions("add_header", AbiVersion::V0_2_1).await;
}

#[tokio::test]
async fn go_sdk_header_filter_edits_both_directions() {
    // Standard Go on wasip1: also exercises the WASI start-up the Go runtime needs.
    header_filter_edits_both_directions("go_add_header", AbiVersion::V0_2_0).await;
}

async fn header_filter_edits_both_directions(module: &str, abi: AbiVersion) {
    let rt = runtime();
    let filter = FilterPlugin::new(&rt, &wasm(module), config(module, "from-test"))
        .await
        .unwrap();
    assert_eq!(filter.abi_version(), abi);
    for path in ["/first?x=1", "/second"] {
        let mut exchange = request(path);
        let mut stream = filter.stream().await.unwrap();
        assert_eq!(
            stream
                .on_request_headers(&mut exchange, true)
                .await
                .unwrap(),
            Flow::Continue
        );
        assert_eq!(
            header(&exchange.request_headers, "x-wasmgate-filter"),
            Some("from-test")
        );
        assert_eq!(
            stream
                .on_response_headers(&mut exchange, false)
                .await
                .unwrap(),
            Flow::Continue
        );
        assert_eq!(
            header(&exchange.response_headers, "x-seen-path"),
            Some(path)
        );
        assert_eq!(
            header(&exchange.response_headers, "x-seen-host"),
            Some("example.com")
        );
        stream.finish(&mut exchange).await.unwrap();
    }
}

/// Filters work on the header map the embedder received (headers.rs): a
/// map the filter only reads is left exactly as it came, pseudo-headers
/// apart; an edited one is the received map plus the edit. The metrics
/// filter reads the request's headers and adds a response header; the
/// header filter edits both.
#[tokio::test]
async fn filters_edit_the_received_header_map_in_place() {
    let rt = runtime();
    for (module, request_edited) in [("metrics", false), ("add_header", true)] {
        let filter = FilterPlugin::new(&rt, &wasm(module), config(module, "from-test"))
            .await
            .unwrap();
        let mut received = HeaderMap::new();
        received.append("user-agent", HeaderValue::from_static("test"));
        received.append("accept", HeaderValue::from_static("a/b"));
        received.append("accept", HeaderValue::from_static("c/d"));
        let mut exchange = request("/edits");
        exchange.request_headers = Headers::from_map(received.clone());
        exchange
            .request_headers
            .push_pseudo(":path", &b"/edits"[..]);
        exchange
            .request_headers
            .push_pseudo(":authority", &b"example.com"[..]);
        let mut stream = filter.stream().await.unwrap();
        stream
            .on_request_headers(&mut exchange, true)
            .await
            .unwrap();
        stream
            .on_response_headers(&mut exchange, false)
            .await
            .unwrap();
        stream.finish(&mut exchange).await.unwrap();
        let mut fields = exchange.request_headers.map().clone();
        if request_edited {
            assert_eq!(
                fields.remove("x-wasmgate-filter").unwrap(),
                "from-test",
                "{module}"
            );
        }
        assert_eq!(fields, received, "{module}");
        assert_eq!(header(&exchange.request_headers, ":path"), Some("/edits"));
        assert_eq!(
            exchange.response_headers.map()["content-length"],
            "0",
            "{module}"
        );
        assert_eq!(header(&exchange.response_headers, ":status"), Some("200"));
    }
}

#[tokio::test]
async fn each_configuration_is_its_own_root_context() {
    let rt = runtime();
    let a = FilterPlugin::new(&rt, &wasm("add_header"), config("a", "route-a"))
        .await
        .unwrap();
    let b = FilterPlugin::new(&rt, &wasm("add_header"), config("b", "route-b"))
        .await
        .unwrap();
    for (filter, expected) in [(&a, "route-a"), (&b, "route-b")] {
        let mut exchange = request("/");
        let mut stream = filter.stream().await.unwrap();
        stream
            .on_request_headers(&mut exchange, true)
            .await
            .unwrap();
        assert_eq!(
            header(&exchange.request_headers, "x-wasmgate-filter"),
            Some(expected)
        );
        stream.finish(&mut exchange).await.unwrap();
    }
}

#[tokio::test]
async fn apisix_fault_injection_answers_locally() {
    let rt = runtime();
    let filter = FilterPlugin::new(
        &rt,
        &wasm("fault_injection"),
        config("fault", r#"{"body":"hello world","http_status":200}"#),
    )
    .await
    .unwrap();
    let mut exchange = request("/anything");
    let mut stream = filter.stream().await.unwrap();
    assert_eq!(
        stream
            .on_request_headers(&mut exchange, true)
            .await
            .unwrap(),
        Flow::Respond
    );
    let local = exchange.local_response.clone().expect("a local response");
    assert_eq!(local.status, 200);
    assert_eq!(local.body, b"hello world");
    assert_eq!(header(&local.headers, "x-fault"), Some("injected"));
    stream.finish(&mut exchange).await.unwrap();
}

#[tokio::test]
async fn refused_configuration_and_foreign_modules_are_clear_errors() {
    let rt = runtime();
    let err = FilterPlugin::new(&rt, &wasm("fault_injection"), config("fault", "not json"))
        .await
        .err()
        .expect("on_configure refuses it");
    assert!(
        format!("{err:#}").contains("proxy_on_configure returned false"),
        "{err:#}"
    );
    let err = FilterPlugin::new(&rt, &wasm("hello"), config("hello", ""))
        .await
        .err()
        .expect("an Extism plugin is not a filter");
    assert!(err.to_string().contains("not a Proxy-Wasm module"), "{err}");
}

#[tokio::test]
async fn shared_data_queues_and_metrics_span_instances() {
    let rt = runtime();
    let mut conf = config("shared_state", "");
    conf.vm_id = "shared-state-test".to_string();
    let filter = FilterPlugin::new(&rt, &wasm("shared_state"), conf)
        .await
        .unwrap();
    // Two streams at once run on two instances: the counter is shared.
    let (mut one, mut two) = (request("/one"), request("/two"));
    let mut first = filter.stream().await.unwrap();
    let mut second = filter.stream().await.unwrap();
    first.on_request_headers(&mut one, true).await.unwrap();
    second.on_request_headers(&mut two, true).await.unwrap();
    first.on_response_headers(&mut one, true).await.unwrap();
    second.on_response_headers(&mut two, true).await.unwrap();
    assert_eq!(header(&one.response_headers, "x-hits"), Some("1"));
    assert_eq!(header(&two.response_headers, "x-hits"), Some("2"));
    first.finish(&mut one).await.unwrap();
    second.finish(&mut two).await.unwrap();
    assert_eq!(filter.status().created, 2, "{:?}", filter.status());

    let shared = wasmgate_proxy_wasm::shared::shared();
    let queue = shared
        .resolve_queue("shared-state-test", b"paths")
        .expect("the plugin registered its queue");
    assert_eq!(shared.dequeue(queue).unwrap(), b"/one");
    assert_eq!(shared.dequeue(queue).unwrap(), b"/two");
    let requests = shared
        .metrics()
        .into_iter()
        .find(|m| m.name == "shared_state_requests")
        .expect("the plugin defined its metric");
    assert_eq!(requests.value, 2);
}

/// A Higress-style module (ABI 0.2.100) that calls two of Higress's
/// extensions: `proxy_redis_init`, which wasmgate implements (for a cluster
/// no granted service stands for: BadArgument, 2, as Envoy answers an
/// unknown cluster), and `proxy_set_upstream_override_host`, which it does
/// not (it links, and returns Unimplemented, 12). The filter reports the
/// statuses in `x-redis-status` and `x-override-status`.
const HIGRESS_EXTENSIONS: &str = r#"(module
  (import "env" "proxy_redis_init" (func $redis_init (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_upstream_override_host" (func $override (param i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "x-redis-status")
  (data (i32.const 64) "x-override-status")
  (data (i32.const 96) "outbound|6379||redis.static")
  (func $digits (param $at i32) (param $s i32)
    (i32.store8 (local.get $at) (i32.add (i32.const 48) (i32.div_u (local.get $s) (i32.const 10))))
    (i32.store8 (i32.add (local.get $at) (i32.const 1)) (i32.add (i32.const 48) (i32.rem_u (local.get $s) (i32.const 10)))))
  (func (export "proxy_abi_version_0_2_100"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32) (i32.const 1024))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (call $digits (i32.const 32)
      (call $redis_init (i32.const 96) (i32.const 27) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 100)))
    (drop (call $add (i32.const 0) (i32.const 0) (i32.const 14) (i32.const 32) (i32.const 2)))
    (call $digits (i32.const 40) (call $override (i32.const 96) (i32.const 4)))
    (drop (call $add (i32.const 0) (i32.const 64) (i32.const 17) (i32.const 40) (i32.const 2)))
    (i32.const 0))
)"#;

#[tokio::test]
async fn higress_extensions_link_and_answer_as_envoy_does() {
    let rt = runtime();
    let filter = FilterPlugin::new(&rt, HIGRESS_EXTENSIONS.as_bytes(), config("higress", ""))
        .await
        .unwrap();
    assert_eq!(filter.abi_version(), AbiVersion::V0_2_100);
    let mut exchange = request("/");
    let mut stream = filter.stream().await.unwrap();
    let flow = stream
        .on_request_headers(&mut exchange, true)
        .await
        .unwrap();
    assert_eq!(flow, Flow::Continue);
    assert_eq!(
        header(&exchange.request_headers, "x-redis-status"),
        Some("02")
    );
    assert_eq!(
        header(&exchange.request_headers, "x-override-status"),
        Some("12")
    );
    stream.finish(&mut exchange).await.unwrap();
}
