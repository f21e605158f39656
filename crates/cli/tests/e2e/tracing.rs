//! Traces, end to end: `wasmgate run` with `tracing:` exports over OTLP to a
//! real Jaeger (built from source, testkit's `JaegerServer`), and what Jaeger's
//! query API then shows is checked: one trace per request, the request's
//! span with a child per filter and one for the upstream call, the upstream
//! request carrying the upstream span's `traceparent`, a client's trace
//! continued, sampling, a plugin's Redis commands and PostgreSQL statements
//! (Extism and Higress filters both), and a collector that is down costing
//! no request.

use std::time::{Duration, Instant};

use crate::common::gateway::{send, until_metric, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient};
use serde_json::Value;
use wasmgate_testkit::JaegerServer;

fn config(endpoint: &str, upstream: u16, sample_ratio: f64) -> String {
    config_tracing(
        &format!(r#"endpoint: "{endpoint}", sample_ratio: {sample_ratio}, batch_delay_ms: 100"#),
        upstream,
    )
}

/// The test gateway, with `tracing: {<tracing>}`.
fn config_tracing(tracing: &str, upstream: u16) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
access_log: {{enabled: false}}
tracing: {{{tracing}}}
plugins:
  - {{name: first, wasm: "{{wasm:add_header}}"}}
  - {{name: second, wasm: "{{wasm:properties}}"}}
  - {{name: caps, wasm: "{{wasm:capabilities}}"}}
upstreams:
  - {{name: web, nodes: [{{address: "127.0.0.1:{upstream}"}}]}}
routes:
  - {{name: fn, path: {{prefix: /fn/}}, function: {{plugin: caps}}, plugins: [{{plugin: first}}]}}
  - {{name: api, path: {{prefix: /}}, upstream: web, plugins: [{{plugin: first}}, {{plugin: second, conf: ["request.trace_id", "request.span_id"]}}]}}
"#
    )
}

/// The trace with `id` once Jaeger has its `want` spans (with their tags),
/// or None after `wait`.
async fn jaeger_trace(
    c: &HttpClient,
    jaeger: &JaegerServer,
    id: &str,
    want: usize,
    wait: Duration,
) -> Option<Value> {
    jaeger_trace_at(c, &jaeger.api(), id, want, wait).await
}

/// [`jaeger_trace`] through the query API at `api`.
async fn jaeger_trace_at(
    c: &HttpClient,
    api: &str,
    id: &str,
    want: usize,
    wait: Duration,
) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let reply = send(c, "GET", &format!("{api}/traces/{id}"), &[], "").await;
        if reply.status == 200 {
            let trace = reply.json()["data"][0].clone();
            // A request's spans are exported in one batch, but a batch may
            // split them: wait for all.
            let spans = trace["spans"].as_array().map_or(0, Vec::len);
            if spans >= want {
                return Some(trace);
            }
        }
        if Instant::now() > deadline {
            // What there was, for the failure's message.
            eprintln!(
                "trace {id} after {wait:?}: {} {}",
                reply.status,
                reply.text()
            );
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn span<'a>(trace: &'a Value, name: &str) -> &'a Value {
    trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operationName"] == name)
        .unwrap_or_else(|| panic!("no span `{name}` in {trace:#}"))
}

fn tag<'a>(span: &'a Value, key: &str) -> &'a Value {
    span["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
        .unwrap_or_else(|| panic!("no tag `{key}` in {span:#}"))
}

fn parent(span: &Value) -> &str {
    span["references"][0]["spanID"].as_str().unwrap_or_default()
}

/// The `traceparent` the upstream got: (trace id, parent span id, flags).
fn traceparent_seen(reply: &crate::common::Reply) -> (String, String, String) {
    let echo = reply.json();
    let value = echo["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("the upstream got no traceparent: {echo}"));
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!((parts.len(), parts[0]), (4, "00"), "{value}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_one_trace_with_its_filters_and_upstream_call() {
    let jaeger = JaegerServer::start();
    let upstream = Upstream::start("web").await;
    let gw = GatewayProc::start(&config(&jaeger.otlp_endpoint(), upstream.port, 1.0));
    let c = client();

    // A request without a trace starts one.
    let reply = send(&c, "GET", &gw.url("/orders?id=7"), &[], "").await;
    assert_eq!(reply.status, 200);
    let (trace_id, upstream_span, flags) = traceparent_seen(&reply);
    assert_eq!(flags, "01", "sampled");
    let trace = jaeger_trace(&c, &jaeger, &trace_id, 4, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no trace {trace_id} in Jaeger: {}", jaeger.log()));
    assert_eq!(trace["spans"].as_array().unwrap().len(), 4, "{trace:#}");
    let request = span(&trace, "GET api");
    assert_eq!(tag(request, "span.kind"), "server");
    assert_eq!(tag(request, "http.response.status_code"), 200);
    assert_eq!(tag(request, "http.request.method"), "GET");
    assert_eq!(tag(request, "url.path"), "/orders");
    assert_eq!(tag(request, "wasmgate.route"), "api");
    assert!(
        request["references"].as_array().unwrap().is_empty(),
        "a root span"
    );
    let request_id = request["spanID"].as_str().unwrap();
    // Filters read the request's trace and span ids as properties.
    let property = |name: &str| {
        reply.headers[format!("x-property-{name}")]
            .to_str()
            .unwrap()
    };
    assert_eq!(property("request.trace_id"), trace_id);
    assert_eq!(property("request.span_id"), request_id);
    for filter in ["first", "second"] {
        let span = span(&trace, &format!("filter {filter}"));
        assert_eq!(parent(span), request_id, "{span:#}");
        assert_eq!(tag(span, "wasmgate.plugin"), filter);
        assert!(tag(span, "wasmgate.filter.callbacks_ms").as_f64().unwrap() > 0.0);
    }
    // The upstream call's span is the one the upstream's traceparent names.
    let call = span(&trace, "GET");
    assert_eq!(call["spanID"], upstream_span.as_str(), "{trace:#}");
    assert_eq!(parent(call), request_id);
    assert_eq!(tag(call, "span.kind"), "client");
    assert_eq!(
        tag(call, "server.address"),
        format!("127.0.0.1:{}", upstream.port).as_str()
    );
    // Children lie within their request's span.
    let (start, end) = (
        request["startTime"].as_i64().unwrap(),
        request["startTime"].as_i64().unwrap() + request["duration"].as_i64().unwrap(),
    );
    for s in trace["spans"].as_array().unwrap() {
        let s_start = s["startTime"].as_i64().unwrap();
        assert!(
            s_start >= start && s_start + s["duration"].as_i64().unwrap() <= end + 1,
            "{s:#}"
        );
    }

    // A client's trace continues: same trace id, the request's span a child
    // of the client's, its tracestate passed on.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let reply = send(
        &c,
        "GET",
        &gw.url("/continued"),
        &[
            (
                "traceparent",
                &format!("00-{client_trace}-{client_span}-01"),
            ),
            ("tracestate", "vendor=opaque"),
        ],
        "",
    )
    .await;
    let (seen_trace, seen_parent, _) = traceparent_seen(&reply);
    assert_eq!(seen_trace, client_trace);
    assert_ne!(
        seen_parent, client_span,
        "the upstream's parent is the gateway's span"
    );
    assert_eq!(reply.json()["headers"]["tracestate"], "vendor=opaque");
    let trace = jaeger_trace(&c, &jaeger, client_trace, 4, Duration::from_secs(20))
        .await
        .expect("the continued trace in Jaeger");
    assert_eq!(parent(span(&trace, "GET api")), client_span);

    // An Extism function's call is a span, and its log lines carry the
    // trace id.
    let client_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let traced = [(
        "traceparent",
        format!("00-{client_trace}-00f067aa0ba902b7-01"),
    )];
    let traced: Vec<(&str, &str)> = traced.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reply = send(&c, "POST", &gw.url("/fn/log"), &traced, "hello-trace").await;
    assert_eq!((reply.status, reply.text().as_str()), (200, "logged"));
    let trace = jaeger_trace(&c, &jaeger, client_trace, 3, Duration::from_secs(20))
        .await
        .expect("the function's trace in Jaeger");
    let call = span(&trace, "call caps.log");
    assert_eq!(
        parent(call),
        span(&trace, "POST fn")["spanID"].as_str().unwrap()
    );
    assert_eq!(tag(call, "wasmgate.function"), "log");
    let logged = gw.logs();
    let line = logged
        .lines()
        .find(|l| l.contains("info: hello-trace"))
        .unwrap_or_else(|| panic!("no log line of the function: {logged}"));
    assert!(line.contains(client_trace), "{line}");

    // /metrics counts what was recorded and exported (4 + 4 + 3 spans).
    let metrics = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    assert!(
        metrics.contains("wasmgate_trace_spans_total{outcome=\"recorded\"} 11"),
        "{metrics}"
    );
    assert!(
        metrics.contains("wasmgate_trace_spans_total{outcome=\"failed\"} 0"),
        "{metrics}"
    );
    // Prometheus reads the family as it is written.
    let (passed, checked) = crate::common::promtool(&metrics);
    assert!(passed, "{checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_ratio_and_the_clients_flag() {
    let jaeger = JaegerServer::start();
    let upstream = Upstream::start("web").await;
    let gw = GatewayProc::start(&config(&jaeger.otlp_endpoint(), upstream.port, 0.0));
    let c = client();
    // Ratio 0: a new trace is not recorded, though its id is passed on.
    let reply = send(&c, "GET", &gw.url("/a"), &[], "").await;
    let (unsampled, _, flags) = traceparent_seen(&reply);
    assert_eq!(flags, "00");
    // A client's trace this node does not record passes on as it came.
    let theirs = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let reply = send(&c, "GET", &gw.url("/c"), &[("traceparent", theirs)], "").await;
    assert_eq!(reply.json()["headers"]["traceparent"], theirs);
    // One the spec refuses (upper-case hex) is replaced by a new trace.
    let refused = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    let reply = send(&c, "GET", &gw.url("/d"), &[("traceparent", refused)], "").await;
    let (fresh, _, flags) = traceparent_seen(&reply);
    assert_ne!(fresh, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!((fresh.as_str(), flags.as_str()), (unsampled.as_str(), "00"));
    assert_eq!(flags, "00");
    // A client that samples its trace is followed.
    let sampled = "0af7651916cd43dd8448eb211c80319c";
    let reply = send(
        &c,
        "GET",
        &gw.url("/b"),
        &[("traceparent", &format!("00-{sampled}-b7ad6b7169203331-01"))],
        "",
    )
    .await;
    assert_eq!(traceparent_seen(&reply).2, "01");
    assert!(
        jaeger_trace(&c, &jaeger, sampled, 4, Duration::from_secs(20))
            .await
            .is_some()
    );
    // By the time the sampled one arrived, the other would have too.
    assert!(
        jaeger_trace(&c, &jaeger, &unsampled, 1, Duration::from_secs(1))
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_decide_sampling_when_respect_sampled_is_off() {
    // No collector is needed: what is recorded is counted before export.
    let upstream = Upstream::start("web").await;
    let tracing = r#"endpoint: "http://127.0.0.1:9", sample_ratio: 0.0, respect_sampled: false"#;
    let gw = GatewayProc::start(&config_tracing(tracing, upstream.port));
    let c = client();
    let theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for path in ["/a", "/b", "/c"] {
        let reply = send(&c, "GET", &gw.url(path), &[("traceparent", theirs)], "").await;
        // The trace goes on, under the client's parent, but unsampled.
        assert_eq!(
            reply.json()["headers"]["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        );
    }
    assert_eq!(spans_counted(&c, &gw, "recorded").await, 0);

    // The control: by default the client's flag is followed.
    let tracing = r#"endpoint: "http://127.0.0.1:9", sample_ratio: 0.0"#;
    let gw = GatewayProc::start(&config_tracing(tracing, upstream.port));
    let reply = send(&c, "GET", &gw.url("/a"), &[("traceparent", theirs)], "").await;
    assert_eq!(traceparent_seen(&reply).2, "01");
    until_metric(
        &c,
        &gw,
        "wasmgate_trace_spans_total{outcome=\"recorded\"}",
        |n| n >= 1.0,
    )
    .await;
}

/// The count of spans `outcome` (`exported`, `failed`) in `/metrics`.
async fn spans_counted(c: &HttpClient, gw: &GatewayProc, outcome: &str) -> u64 {
    let metrics = send(c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    let prefix = format!("wasmgate_trace_spans_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filters_callout_carries_the_requests_trace() {
    let jaeger = JaegerServer::start();
    let (web, auth) = (Upstream::start("web").await, Upstream::start("auth").await);
    let gateway = |ratio: f64| {
        GatewayProc::start(&format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
access_log: {{enabled: false}}
tracing: {{endpoint: "{}", sample_ratio: {ratio}, batch_delay_ms: 100}}
plugins:
  - {{name: auth, wasm: "{{wasm:http_auth_random}}"}}
upstreams:
  - {{name: web, nodes: [{{address: "127.0.0.1:{}"}}]}}
  - {{name: auth, nodes: [{{address: "127.0.0.1:{}"}}]}}
routes:
  - {{name: guarded, upstream: web, plugins: [{{plugin: auth}}]}}
"#,
            jaeger.otlp_endpoint(),
            web.port,
            auth.port
        ))
    };
    let c = client();
    // Recorded: the callout names the request's span as its parent.
    let gw = gateway(1.0);
    let reply = send(&c, "GET", &gw.url("/in"), &[("x-token", "allow")], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let (trace_id, _, _) = traceparent_seen(&reply);
    let called = auth.received("/bytes/1");
    let carried = called.last().expect("the filter called out")["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    let trace = jaeger_trace(&c, &jaeger, &trace_id, 3, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no trace {trace_id}: {}", jaeger.log()));
    let request_span = span(&trace, "GET guarded")["spanID"].as_str().unwrap();
    assert_eq!(carried, format!("00-{trace_id}-{request_span}-01"));
    // Not recorded: the same trace id goes on, unsampled.
    let gw = gateway(0.0);
    let reply = send(&c, "GET", &gw.url("/in"), &[("x-token", "allow")], "").await;
    assert_eq!(reply.status, 200);
    let (trace_id, _, _) = traceparent_seen(&reply);
    let called = auth.received("/bytes/1");
    let carried = called.last().unwrap()["traceparent"].to_str().unwrap();
    assert!(
        carried.starts_with(&format!("00-{trace_id}-")) && carried.ends_with("-00"),
        "{carried}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_over_http_and_over_tls_reach_the_collector() {
    let upstream = Upstream::start("web").await;
    let c = client();
    // One request through a gateway exporting with `tracing`, found in
    // `jaeger` by its trace id.
    let traced = |jaeger: &JaegerServer, tracing: String| {
        let gw = GatewayProc::start(&config_tracing(&tracing, upstream.port));
        let c = c.clone();
        let jaeger_api = jaeger.api();
        async move {
            let reply = send(&c, "GET", &gw.url("/x"), &[], "").await;
            assert_eq!(reply.status, 200);
            let (trace_id, _, _) = traceparent_seen(&reply);
            let found =
                jaeger_trace_at(&c, &jaeger_api, &trace_id, 4, Duration::from_secs(20)).await;
            (gw, found.is_some())
        }
    };
    // OTLP/HTTP, plain.
    let plain = JaegerServer::start();
    let http = format!(
        r#"endpoint: "{}", protocol: http, batch_delay_ms: 100"#,
        plain.otlp_http_endpoint()
    );
    let (_gw, found) = traced(&plain, http).await;
    assert!(found, "no trace over OTLP/HTTP: {}", plain.log());

    // Both protocols over TLS, trusting the test's CA.
    let pki = wasmgate_testkit::pki::Pki::new("collector-ca");
    let certificate = pki.server(
        &["localhost", "IP:127.0.0.1"],
        wasmgate_testkit::pki::KeyType::EcdsaP256,
        1,
        1,
    );
    let tls = JaegerServer::start_tls(&certificate);
    let ca = pki.ca.display().to_string();
    for (endpoint, protocol) in [
        (tls.otlp_endpoint(), "grpc"),
        (tls.otlp_http_endpoint(), "http"),
    ] {
        assert!(endpoint.starts_with("https://"));
        let tracing = format!(
            r#"endpoint: "{endpoint}", protocol: {protocol}, ca_file: "{ca}", batch_delay_ms: 100"#
        );
        let (_gw, found) = traced(&tls, tracing).await;
        assert!(
            found,
            "no trace over OTLP/{protocol} with TLS: {}",
            tls.log()
        );
    }

    // Without the CA, the collector's certificate is not trusted: its spans
    // fail (counted), the requests do not.
    let untrusted = format!(
        r#"endpoint: "{}", protocol: http, batch_delay_ms: 100"#,
        tls.otlp_http_endpoint()
    );
    let gw = GatewayProc::start(&config_tracing(&untrusted, upstream.port));
    for i in 0..5 {
        let reply = send(&c, "GET", &gw.url(&format!("/{i}")), &[], "").await;
        assert_eq!(reply.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while spans_counted(&c, &gw, "failed").await == 0 {
        assert!(Instant::now() < deadline, "no failed export counted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(spans_counted(&c, &gw, "exported").await, 0);
}

/// A collector that is down costs no request, and no request's time: the
/// exporter gives up on a collector after 5 s (crates/observe's trace.rs),
/// so a request that waited on it would take that long; each must be
/// answered in well under it, for a collector that refuses connections and
/// for one that takes them and never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_no_request() {
    const BOUND: Duration = Duration::from_millis(2500);
    let upstream = Upstream::start("web").await;
    // Nothing listens at the first; the second accepts (the kernel's backlog)
    // and never reads.
    let refusing = format!("http://127.0.0.1:{}", wasmgate_testkit::free_port());
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_endpoint = format!("http://{}", silent.local_addr().unwrap());
    for endpoint in [refusing, silent_endpoint] {
        let gw = GatewayProc::start(&config(&endpoint, upstream.port, 1.0));
        let c = client();
        let mut slowest = Duration::ZERO;
        for i in 0..50 {
            let started = Instant::now();
            let reply = send(&c, "GET", &gw.url(&format!("/{i}")), &[], "").await;
            slowest = slowest.max(started.elapsed());
            assert_eq!(reply.status, 200, "{endpoint}: request {i}");
        }
        assert!(
            slowest < BOUND,
            "{endpoint}: a request took {slowest:?} (bound {BOUND:?})"
        );
        // The spans that could not go are counted.
        let deadline = Instant::now() + Duration::from_secs(30);
        while spans_counted(&c, &gw, "failed").await == 0 {
            assert!(
                Instant::now() < deadline,
                "{endpoint}: no failed export counted"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_traces_its_calls() {
    let jaeger = JaegerServer::start();
    let plugin = crate::common::plugin("capabilities");
    // Over OTLP/HTTP (the gateway's tests use gRPC).
    let endpoint = jaeger.otlp_http_endpoint();
    let server = crate::common::Server::start(&[
        plugin.to_str().unwrap(),
        "log",
        "--access-log",
        "off",
        "--trace-endpoint",
        &endpoint,
        "--trace-protocol",
        "http",
    ]);
    let c = client();
    let trace_id = "6bf92f3577b34da6a3ce929d0e0e4738";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let reply = send(
        &c,
        "POST",
        &server.url("/log"),
        &[("traceparent", &traceparent)],
        "x",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let trace = jaeger_trace(&c, &jaeger, trace_id, 2, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no trace of serve's call: {}", jaeger.log()));
    let request = span(&trace, "POST log");
    assert_eq!(parent(request), "00f067aa0ba902b7");
    let call = span(&trace, "call capabilities.log");
    assert_eq!(parent(call), request["spanID"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_redis_commands_and_postgres_statements_are_spans() {
    let jaeger = JaegerServer::start();
    let db = crate::common::orders_db();
    let redis = wasmgate_testkit::RedisServer::start();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
access_log: {{enabled: false}}
tracing: {{endpoint: "{}", batch_delay_ms: 100}}
services:
  - {{name: orders, postgres: "{}", tls_ca_file: "{}"}}
  - {{name: cache, redis: "{}"}}
plugins:
  - {{name: go_orders, wasm: "{{wasm:go_orders}}", services: [orders, cache]}}
  - {{name: counter, wasm: "{{wasm:higress_redis_counter}}", services: [cache]}}
routes:
  - name: go
    path: {{prefix: /go/}}
    plugins: [{{plugin: counter, conf: {{redis: {{service_name: cache.static, service_port: 6379}}, key_prefix: "hits:"}}}}]
    function: {{plugin: go_orders}}
"#,
        jaeger.otlp_endpoint(),
        db.url(),
        db.ca_cert_path().unwrap().display(),
        redis.url()
    ));
    let c = client();
    let traced = |id: &str| format!("00-{id}-00f067aa0ba902b7-01");

    // The Higress filter's INCR (a Proxy-Wasm callout on a task of its own)
    // and the Go plugin's (an Extism host call): two Redis spans.
    let visits = "7bf92f3577b34da6a3ce929d0e0e4739";
    let reply = send(
        &c,
        "POST",
        &gw.url("/go/visits"),
        &[("traceparent", &traced(visits))],
        "k",
    )
    .await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (200, "1"),
        "{}",
        gw.logs()
    );
    assert_eq!(reply.headers["x-redis-count"], "1");
    let trace = jaeger_trace(&c, &jaeger, visits, 5, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no trace with Redis spans: {}", jaeger.log()));
    // Each hangs under what made it: the filter's span, the function call's.
    let id_of = |name: &str| span(&trace, name)["spanID"].as_str().unwrap().to_string();
    let (filter_id, function_id) = (id_of("filter counter"), id_of("call go_orders.visits"));
    let redis_spans: Vec<&Value> = trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["operationName"] == "INCR cache")
        .collect();
    assert_eq!(redis_spans.len(), 2, "{trace:#}");
    let mut parents: Vec<&str> = redis_spans.iter().map(|s| parent(s)).collect();
    parents.sort();
    let mut want = [filter_id.as_str(), function_id.as_str()];
    want.sort();
    assert_eq!(parents, want, "{trace:#}");
    for s in redis_spans {
        assert_eq!(tag(s, "db.system.name"), "redis");
        assert_eq!(tag(s, "span.kind"), "client");
    }

    // A statement: its text with its placeholders, never its values.
    let listed = "8bf92f3577b34da6a3ce929d0e0e4730";
    let reply = send(
        &c,
        "POST",
        &gw.url("/go/list_orders"),
        &[("traceparent", &traced(listed))],
        "customer-secret",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let trace = jaeger_trace(&c, &jaeger, listed, 5, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no trace with a PostgreSQL span: {}", jaeger.log()));
    let statement = span(&trace, "SELECT orders");
    assert_eq!(
        parent(statement),
        span(&trace, "call go_orders.list_orders")["spanID"]
            .as_str()
            .unwrap()
    );
    assert_eq!(tag(statement, "db.system.name"), "postgresql");
    let text = tag(statement, "db.query.text").as_str().unwrap();
    assert!(text.contains("from orders where customer = $1"), "{text}");
    assert!(!trace.to_string().contains("customer-secret"), "{trace:#}");
}
