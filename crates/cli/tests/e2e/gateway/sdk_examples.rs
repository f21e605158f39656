//! The Rust and Go Proxy-Wasm SDKs' examples, each as its SDK documents it
//! (a `_rust_sdk` and a `_go_sdk` twin where both SDKs have it): body
//! rewrites and streaming, per-route configuration, HTTP calls, JSON
//! validation, ticks, shared queues, metrics, postponed requests and
//! shared data.

use crate::common::client;
use crate::common::gateway::{
    get, metric, send, until_header_grows, until_metric, with_upstream, GatewayProc,
};
use crate::common::upstream::Upstream;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_body_rewrites_buffered_bodies_and_streams_the_rest_rust_sdk() {
    http_body_rewrites_buffered_bodies_and_streams_the_rest("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_body_rewrites_buffered_bodies_and_streams_the_rest_go_sdk() {
    http_body_rewrites_buffered_bodies_and_streams_the_rest("go_").await;
}

async fn http_body_rewrites_buffered_bodies_and_streams_the_rest(sdk: &str) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: body, wasm: "{{wasm:{sdk}http_body}}"}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes: [{{name: all, plugins: [{{plugin: body}}], upstream: backend}}]
"#
        ),
    )
    .await;
    let c = client();
    let reply = get(&c, &gw.url("/secret")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "Original message body (24 bytes) redacted.\n");
    // Request bodies: the upstream sees the rewritten one.
    let reply = send(&c, "POST", &gw.url("/echo"), &[], "my secret password").await;
    assert_eq!(reply.json()["body"], "redacted");
    let reply = send(&c, "POST", &gw.url("/echo"), &[], "nothing to hide").await;
    assert_eq!(reply.json()["body"], "nothing to hide");
    // A streamed body (3 chunks over 200 ms) arrives whole and unchanged.
    let reply = get(&c, &gw.url("/stream")).await;
    assert_eq!(reply.text(), "chunk-0\nchunk-1\nchunk-2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfiltered_response_bodies_stream_without_buffering() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: filtered, headers: {x-filter: "on"}, plugins: [{plugin: h}], upstream: backend}
  - {name: plain, upstream: backend}
"#,
    )
    .await;
    use http_body_util::BodyExt;
    for filter in ["off", "on"] {
        let c = client();
        let request = hyper::Request::get(gw.url("/stream"))
            .header("x-filter", filter)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let started = Instant::now();
        let response = c.request(request).await.unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        // The first chunk comes before the upstream finished (200 ms later).
        assert!(
            started.elapsed() < Duration::from_millis(180),
            "filter {filter}: first chunk after {:?}",
            started.elapsed()
        );
        assert!(first.starts_with(b"chunk-0"));
        let rest = body.collect().await.unwrap().to_bytes();
        assert!(rest.ends_with(b"chunk-2\n"), "filter {filter}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_config_header_comes_from_each_routes_conf_rust_sdk() {
    http_config_header_comes_from_each_routes_conf("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_config_header_comes_from_each_routes_conf_go_sdk() {
    http_config_header_comes_from_each_routes_conf("go_").await;
}

async fn http_config_header_comes_from_each_routes_conf(sdk: &str) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: cfg, wasm: "{{wasm:{sdk}http_config}}"}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes:
  - {{name: a, path: {{prefix: /a}}, plugins: [{{plugin: cfg, conf: alpha}}], upstream: backend}}
  - {{name: b, path: {{prefix: /b}}, plugins: [{{plugin: cfg, conf: {{nested: true}}}}], upstream: backend}}
"#
        ),
    )
    .await;
    let c = client();
    let a = get(&c, &gw.url("/a")).await;
    assert_eq!(a.header("custom-header"), Some("alpha"));
    let b = get(&c, &gw.url("/b")).await;
    assert_eq!(b.header("custom-header"), Some(r#"{"nested":true}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_auth_random_calls_out_then_continues_or_forbids_rust_sdk() {
    http_auth_random_calls_out_then_continues_or_forbids("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_auth_random_calls_out_then_continues_or_forbids_go_sdk() {
    http_auth_random_calls_out_then_continues_or_forbids("go_").await;
}

async fn http_auth_random_calls_out_then_continues_or_forbids(sdk: &str) {
    let backend = Upstream::start("backend").await;
    let auth = Upstream::start("auth").await;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
plugins:
  - {{name: auth, wasm: "{{wasm:{sdk}http_auth_random}}"}}
upstreams:
  - {{name: backend, nodes: [{{address: "{}"}}]}}
  - {{name: auth-service, nodes: [{{address: "{}"}}]}}
  - {{name: dead-auth, nodes: [{{address: "127.0.0.1:1"}}]}}
routes:
  - name: dead
    path: {{prefix: /dead}}
    plugins: [{{plugin: auth, conf: {{upstream: dead-auth}}}}]
    upstream: backend
  - name: broken
    path: {{prefix: /broken}}
    plugins: [{{plugin: auth, conf: {{upstream: no-such-upstream}}}}]
    upstream: backend
  - name: all
    plugins: [{{plugin: auth, conf: {{upstream: auth-service}}}}]
    upstream: backend
"#,
        backend.address(),
        auth.address()
    ));
    let c = client();
    let allowed = send(&c, "GET", &gw.url("/data"), &[("x-token", "allow")], "").await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(allowed.json()["headers"]["x-auth"], "allowed");
    let denied = send(&c, "GET", &gw.url("/data"), &[("x-token", "nope")], "").await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.text(), "Access forbidden.\n");
    assert_eq!(denied.header("x-auth"), Some("denied"));
    assert_eq!(auth.hits(), 2, "one callout per request");
    // A callout to a dead service is answered empty: denied, and
    // proxy_get_status says why (the Rust filter reports it in a header).
    let dead = get(&c, &gw.url("/dead")).await;
    assert_eq!(dead.status, 403);
    if sdk.is_empty() {
        assert_eq!(denied.header("x-callout-status"), Some("0"));
        let status = dead.header("x-callout-status").unwrap_or_default();
        assert!(status.starts_with("14 "), "proxy_get_status: {status:?}");
    }
    assert_eq!(backend.hits(), 1, "only the allowed request went upstream");
    // Dispatching to an unknown upstream fails at once (BadArgument): 503.
    let broken = get(&c, &gw.url("/broken")).await;
    assert_eq!(broken.status, 503);
    // Many concurrent paused requests: none blocks a worker thread.
    let requests: Vec<_> = (0..50)
        .map(|i| {
            let c = c.clone();
            let url = gw.url(&format!("/n/{i}"));
            tokio::spawn(async move { send(&c, "GET", &url, &[("x-token", "allow")], "").await })
        })
        .collect();
    for r in requests {
        assert_eq!(r.await.unwrap().status, 200);
    }
}

/// An upstream behind `/rust` and `/go`, each with its SDK's JSON
/// validation filter (the Go one requires the key `name`).
async fn json_validation_gateway() -> (Upstream, GatewayProc) {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: rust_json, wasm: "{wasm:json_validation}"}
  - {name: go_json, wasm: "{wasm:go_json_validation}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: rust, path: {prefix: /rust}, plugins: [{plugin: rust_json}], upstream: backend}
  - {name: go, path: {prefix: /go}, plugins: [{plugin: go_json, conf: {requiredKeys: [name]}}], upstream: backend}
"#,
    )
    .await;
    (up, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_validation_rust_and_go() {
    let (up, gw) = json_validation_gateway().await;
    let c = client();
    let json = [("content-type", "application/json")];
    let text = [("content-type", "text/plain")];
    let r = send(&c, "POST", &gw.url("/rust"), &text, "{}").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (403, "content-type must be application/json\n")
    );
    let r = send(&c, "POST", &gw.url("/rust"), &json, r#"{"id":1}"#).await;
    assert_eq!((r.status, r.text().as_str()), (403, "invalid payload\n"));
    let r = send(&c, "POST", &gw.url("/rust"), &json, "not json").await;
    assert_eq!(r.status, 403);
    let r = send(
        &c,
        "POST",
        &gw.url("/rust"),
        &json,
        r#"{"id":1,"token":"t"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["body"], r#"{"id":1,"token":"t"}"#);

    let r = send(&c, "POST", &gw.url("/go"), &text, "{}").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (403, "content-type must be application/json\n")
    );
    let r = send(&c, "POST", &gw.url("/go"), &json, r#"{"id":1}"#).await;
    assert_eq!((r.status, r.text().as_str()), (403, "invalid payload\n"));
    let r = send(&c, "POST", &gw.url("/go"), &json, r#"{"name":"ada"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["body"], r#"{"name":"ada"}"#);
    assert_eq!(up.hits(), 2, "only valid payloads reach the upstream");
}

/// A filter that buffers the body and refuses it: the upstream never hears
/// of the request, not even its head while the client is still sending the
/// body (the gateway holds the head back until the filters let body through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_a_filter_refuses_never_reaches_the_upstream() {
    use std::io::{Read, Write};
    let (up, gw) = json_validation_gateway().await;
    let sent_to_backend = format!(
        r#"wasmgate_upstream_node_requests_total{{upstream="backend",node="{}"}}"#,
        up.address()
    );
    let c = client();
    for (path, route, plugin) in [("/rust", "rust", "rust_json"), ("/go", "go", "go_json")] {
        let calls =
            format!(r#"wasmgate_plugin_call_seconds_count{{plugin="{plugin}",route="{route}"}}"#);
        let before = metric(&c, &gw, &calls).await;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 8\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        // The filter has had the head (its call count moved): a gateway that
        // sent heads on at once would have sent this one by now, so it
        // would be counted as sent to the node below, and heard upstream.
        until_metric(&c, &gw, &calls, |n| n > before).await;
        stream.write_all(b"not json").unwrap();
        let answer = tokio::task::spawn_blocking(move || {
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
        let sent = metric(&c, &gw, &sent_to_backend).await;
        assert_eq!(sent, 0.0, "{path}: the refused request was sent upstream");
        assert_eq!(
            up.hits(),
            0,
            "{path}: the refused request reached the upstream"
        );
    }
    // A filter that only reads the headers: the request's and the
    // response's header maps go on as they came (not rebuilt from the ABI's
    // pairs), repeated headers in their order, hop-by-hop ones removed.
    let reply = send(
        &c,
        "POST",
        &gw.url("/go"),
        &[
            ("content-type", "application/json"),
            ("x-multi", "a"),
            ("x-multi", "b"),
            ("keep-alive", "timeout=5"),
        ],
        r#"{"name":"ada"}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(up.hits(), 1);
    let seen = &reply.json()["headers"];
    assert_eq!(seen["x-multi"], "a, b");
    assert_eq!(seen["content-type"], "application/json");
    assert!(seen["keep-alive"].is_null(), "{seen}");
    assert!(seen["x-forwarded-for"].is_string(), "{seen}");
    assert_eq!(reply.header("x-upstream"), Some("backend"));
    assert!(reply.header("via").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_shared_queue_and_metrics_rust_sdk() {
    ticks_shared_queue_and_metrics("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_shared_queue_and_metrics_go_sdk() {
    ticks_shared_queue_and_metrics("go_").await;
}

async fn ticks_shared_queue_and_metrics(sdk: &str) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: tick, wasm: "{{wasm:{sdk}tick}}"}}
  - {{name: queue, wasm: "{{wasm:{sdk}shared_queue}}"}}
  - {{name: metrics, wasm: "{{wasm:{sdk}metrics}}"}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes:
  - {{name: tick, path: {{prefix: /tick}}, plugins: [{{plugin: tick}}], upstream: backend}}
  - {{name: queue, path: {{prefix: /queue}}, plugins: [{{plugin: queue}}], upstream: backend}}
  - {{name: metrics, path: {{prefix: /metrics}}, plugins: [{{plugin: metrics}}], upstream: backend}}
"#
        ),
    )
    .await;
    let c = client();
    // Ticks: the root context's 50 ms timer keeps counting.
    // Five more ticks of a 50 ms timer take 250 ms: 2 s is room for a busy
    // machine, and too short for a timer that fires at a tenth of its rate.
    until_header_grows(&c, &gw.url("/tick"), "x-ticks", 5, Duration::from_secs(2)).await;

    // Queue: every request enqueues its path; the root context drains it.
    for i in 0..5 {
        get(&c, &gw.url(&format!("/queue/{i}"))).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = get(&c, &gw.url("/queue/last")).await;
        let received = reply.number("x-received");
        if received >= 5 {
            assert!(reply
                .header("x-last-message")
                .unwrap()
                .starts_with("/queue/"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue drained only {received} items"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Metrics: defined by the plugin, read back by it, and exported.
    for expected in 1..=3u64 {
        let reply = get(&c, &gw.url("/metrics/x")).await;
        assert_eq!(reply.number("x-requests-seen"), expected);
    }
    // Exported under the guest prefix, with the plugin and the name it gave
    // (the Go plugin's names carry a go_ prefix).
    let text = get(&c, &gw.admin_url("/metrics")).await.text();
    let labels = |name: &str| format!(r#"{{plugin="metrics",name="{sdk}{name}"}}"#);
    assert!(
        text.contains(&format!(
            "\nwasmcustom_{sdk}wasm_requests_total{} 3",
            labels("wasm_requests_total")
        )),
        "{text}"
    );
    let gauge = format!("# TYPE wasmcustom_{sdk}wasm_last_request_headers gauge");
    assert!(text.contains(&gauge), "{text}");
    let histogram = format!(
        "\nwasmcustom_{sdk}wasm_request_header_count_count{} 3",
        labels("wasm_request_header_count")
    );
    assert!(text.contains(&histogram), "{text}");
    assert!(
        text.contains(r#"wasmgate_route_requests_total{route="metrics",class="2xx"} 3"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postponed_requests_resume_on_the_next_tick_rust_sdk() {
    postponed_requests_resume_on_the_next_tick("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postponed_requests_resume_on_the_next_tick_go_sdk() {
    postponed_requests_resume_on_the_next_tick("go_").await;
}

async fn postponed_requests_resume_on_the_next_tick(sdk: &str) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: postpone, wasm: "{{wasm:{sdk}postpone_requests}}"}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes: [{{name: all, plugins: [{{plugin: postpone}}], upstream: backend}}]
"#
        ),
    )
    .await;
    let c = client();
    let started = Instant::now();
    let reply = get(&c, &gw.url("/later")).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["headers"]["x-postponed"], "true");
    assert!(
        waited >= Duration::from_millis(50),
        "resumed after {waited:?}"
    );
    assert!(waited < Duration::from_secs(2), "resumed after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_data_counts_across_instances() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: state, wasm: "{wasm:shared_state}", pool_size: 8}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes: [{name: all, plugins: [{plugin: state}], upstream: backend}]
"#,
    )
    .await;
    let c = client();
    let requests: Vec<_> = (0..40)
        .map(|_| {
            let c = c.clone();
            let url = gw.url("/");
            tokio::spawn(async move { get(&c, &url).await })
        })
        .collect();
    let mut hits = Vec::new();
    for r in requests {
        hits.push(r.await.unwrap().number("x-hits"));
    }
    hits.sort();
    // Compare-and-swap: 40 concurrent increments, none lost, none repeated.
    assert_eq!(hits, (1..=40).collect::<Vec<u64>>());
}
