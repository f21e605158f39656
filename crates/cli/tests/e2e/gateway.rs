//! `wasmgate run` as a process, with Proxy-Wasm filters built from source by
//! the official Rust and Go SDKs, in front of real HTTP upstreams started by
//! the tests. Each test reproduces what the SDK example documents.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::gateway::{get, send, until_metric, with_upstream, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, wasmgate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_and_header_filters_edit_both_directions() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: rust_header, wasm: "{wasm:add_header}", priority: 10}
  - {name: go_header, wasm: "{wasm:go_add_header}", priority: 20}
upstreams:
  - name: backend
    nodes: [{address: "{backend}"}]
routes:
  - name: only-post
    path: {exact: /submit}
    methods: [POST]
    headers: {x-tenant: blue}
    respond: {status: 201, body: "submitted"}
  - name: wildcard-host
    hosts: ["*.example.com"]
    respond: {status: 200, body: "example subdomain"}
  - name: users
    path: {regex: "/users/[0-9]+"}
    plugins:
      - {plugin: rust_header, conf: rust-conf}
      - {plugin: go_header, conf: go-conf}
    upstream: backend
  - name: plain
    path: {prefix: /plain/}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    // Chain order: go_header (priority 20) runs before rust_header (10).
    let reply = get(&c, &gw.url("/users/42?x=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["path"], "/users/42?x=1");
    assert_eq!(reply.header("x-seen-path"), Some("/users/42?x=1"));
    assert_eq!(reply.header("x-upstream"), Some("backend"));
    // Both filters added their request header; the upstream saw both values.
    let seen = echo["headers"]["x-wasmgate-filter"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        seen.contains("go-conf") && seen.contains("rust-conf"),
        "{seen}"
    );
    // Forwarding headers.
    assert_eq!(echo["headers"]["x-forwarded-for"], "127.0.0.1");
    assert_eq!(echo["headers"]["x-forwarded-proto"], "http");
    assert_eq!(
        echo["headers"]["x-forwarded-host"],
        format!("127.0.0.1:{}", gw.port)
    );
    assert_eq!(echo["headers"]["via"], "1.1 wasmgate");
    assert!(reply.header("via").unwrap().contains("1.1 wasmgate"));

    // Regex is anchored: /users/42/x is not `users`, and nothing else matches.
    let reply = get(&c, &gw.url("/users/42/x")).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["kind"], "no_route");

    // Method and header conditions.
    let reply = send(&c, "POST", &gw.url("/submit"), &[("x-tenant", "blue")], "").await;
    assert_eq!((reply.status, reply.text().as_str()), (201, "submitted"));
    let reply = send(&c, "POST", &gw.url("/submit"), &[("x-tenant", "red")], "").await;
    assert_eq!(reply.status, 404);
    let reply = get(&c, &gw.url("/submit")).await;
    assert_eq!(reply.status, 404);

    // Wildcard hosts match subdomains, not the apex.
    let reply = send(&c, "GET", &gw.url("/"), &[("host", "api.example.com")], "").await;
    assert_eq!(reply.text(), "example subdomain");
    let reply = send(&c, "GET", &gw.url("/"), &[("host", "example.com")], "").await;
    assert_eq!(reply.status, 404);

    // A route without filters proxies bodies as they are.
    let reply = send(&c, "PUT", &gw.url("/plain/x"), &[], "payload").await;
    assert_eq!(reply.json()["body"], "payload");
    assert_eq!(reply.json()["method"], "PUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_cleartext_downstream() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes: [{name: all, plugins: [{plugin: h, conf: over-h2}], upstream: backend}]
"#,
    )
    .await;
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let reply = send(&h2, "POST", &gw.url("/h2"), &[], "body over h2").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["body"], "body over h2");
    assert_eq!(echo["headers"]["x-wasmgate-filter"], "over-h2");
    assert_eq!(reply.header("x-seen-path"), Some("/h2"));
}

/// A route's own header changes: the request's before its filters and the
/// upstream see it (the filter echoes what it saw), the response's on every
/// answer, a filter's local one too. A bad header name is refused by check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_own_header_changes_apply_to_requests_and_every_response() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: fault, wasm: "{wasm:fault_injection}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: local
    path: {prefix: /local}
    plugins: [{plugin: fault, conf: {body: "from the filter", http_status: 200}}]
    response_headers: {set: {x-served-by: wasmgate}}
    upstream: backend
  - name: edited
    request_headers: {remove: [x-secret], set: {x-env: prod}, add: {x-via: edge}}
    response_headers: {remove: [x-upstream], add: {x-served-by: wasmgate}}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let reply = send(
        &c,
        "GET",
        &gw.url("/edited"),
        &[
            ("x-secret", "s3cret"),
            ("x-env", "dev"),
            ("x-via", "client"),
        ],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-served-by"), Some("wasmgate"));
    assert_eq!(
        reply.header("x-upstream"),
        None,
        "removed from the response"
    );
    let seen = up.received("/edited").pop().unwrap();
    assert!(seen.get("x-secret").is_none());
    assert_eq!(seen["x-env"], "prod");
    assert_eq!(seen.get_all("x-via").iter().count(), 2);
    let local = get(&c, &gw.url("/local")).await;
    assert_eq!(local.text(), "from the filter");
    assert_eq!(local.header("x-served-by"), Some("wasmgate"));

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, request_headers: {set: {\"bad name\": x}}}]\n",
    );
    assert!(
        stderr.contains("routes[r].request_headers") && stderr.contains("bad name"),
        "{stderr}"
    );
}

/// A route's URL changes: a prefix replaced by whole segments (the query
/// kept) and the host replaced, as the upstream sees them; query matches
/// with decoded values, header and query expressions; a redirect that
/// replaces a prefix. `check` refuses a rewrite that gives both a path and
/// a prefix, and an expression that does not compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_query_matches_and_prefix_redirects() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: gold
    path: {prefix: /shop}
    query: {tier: gold, who: "a b"}
    rewrite: {replace_prefix: {from: /shop, to: /store}, host: internal.example}
    upstream: backend
  - name: patterned
    path: {prefix: /shop}
    header_regex: {x-tier: "silver|bronze"}
    query_regex: {id: "[0-9]+"}
    respond: {status: 200, body: "patterned"}
  - name: others
    path: {prefix: /shop}
    respond: {status: 200, body: "not gold"}
  - name: moved
    path: {prefix: /old}
    redirect: {replace_prefix: {from: /old, to: /new}, status: 308}
"#,
    )
    .await;
    let c = client();
    let reply = get(&c, &gw.url("/shop/items?tier=gold&who=a%20b&x=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["path"], "/store/items?tier=gold&who=a%20b&x=1");
    assert_eq!(echo["headers"]["host"], "internal.example");
    for other in [
        "/shop/items?tier=silver&who=a+b",
        "/shop/items",
        "/shop?tier=gold",
    ] {
        assert_eq!(get(&c, &gw.url(other)).await.text(), "not gold", "{other}");
    }
    // Expressions match whole values: of any of a header's values, and of
    // the decoded query parameter.
    let patterned = |path: &'static str, tier: &'static str| {
        let (c, url) = (c.clone(), gw.url(path));
        async move { send(&c, "GET", &url, &[("x-tier", tier)], "").await.text() }
    };
    assert_eq!(patterned("/shop?id=42", "bronze").await, "patterned");
    assert_eq!(patterned("/shop?id=42x", "bronze").await, "not gold");
    assert_eq!(patterned("/shop?id=42", "bronzed").await, "not gold");
    assert_eq!(patterned("/shop", "silver").await, "not gold");
    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, header_regex: {x: '('}}]\n",
    );
    assert!(stderr.contains("routes[r].header_regex.x"), "{stderr}");
    // A prefix is replaced by whole segments only.
    let reply = get(&c, &gw.url("/shopping?tier=gold&who=a+b")).await;
    assert_eq!(reply.json()["path"], "/shopping?tier=gold&who=a+b");
    let moved = get(&c, &gw.url("/old/page?q=1")).await;
    assert_eq!(moved.status, 308);
    let location = moved.header("location").unwrap();
    assert!(location.ends_with("/new/page?q=1"), "{location}");

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, rewrite: {path: /a, replace_prefix: {from: /b, to: /c}}}]\n",
    );
    assert!(stderr.contains("routes[r].rewrite"), "{stderr}");
}

/// Mirrors: a copy of each request, body and all, goes to the mirror
/// upstream while the original is answered by its own; a share copies
/// exactly that share; a mirror that is down costs the original nothing
/// and is counted in /metrics. `check` refuses a mirror of a fixed answer
/// and one naming no upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_copy_requests_and_never_hold_up_the_original() {
    let main = Upstream::start("main").await;
    let shadow = Upstream::start("shadow").await;
    // A mirror that takes connections and never reads from them.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stalled_address = stalled.local_addr().unwrap().to_string();
    let _holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = stalled.accept().await {
            held.push(stream);
        }
    });
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - {{name: main, nodes: [{{address: "{}"}}]}}
  - {{name: shadow, nodes: [{{address: "{}"}}]}}
  - {{name: gone, retries: 0, nodes: [{{address: "127.0.0.1:1"}}]}}
  - {{name: stalled, nodes: [{{address: "{}"}}]}}
routes:
  - {{name: slow, path: {{prefix: /slow-mirror}}, upstream: main, mirror: [{{upstream: stalled}}]}}
  - {{name: all, path: {{prefix: /all}}, upstream: main, mirror: [{{upstream: shadow}}]}}
  - {{name: half, path: {{prefix: /half}}, upstream: main, mirror: [{{upstream: shadow, percent: 50}}]}}
  - {{name: dead, path: {{prefix: /dead}}, upstream: main, mirror: [{{upstream: gone}}]}}
"#,
        main.address(),
        shadow.address(),
        stalled_address
    ));
    let c = client();
    // A copy that cannot keep up is cut off; the original goes through.
    let big = vec![b'x'; 64 << 20];
    let reply = send(&c, "POST", &gw.url("/slow-mirror"), &[], big).await;
    assert_eq!(reply.status, 200);
    let cut = r#"wasmgate_route_mirrored_total{route="slow",upstream="stalled",outcome="cut"}"#;
    assert_eq!(crate::common::gateway::metric(&c, &gw, cut).await, 1.0);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let reply = send(&c, "POST", &gw.url("/all"), &[], body.clone()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["upstream"], "main");
    let deadline = Instant::now() + Duration::from_secs(10);
    while shadow.received_bodies("/all").is_empty() {
        assert!(Instant::now() < deadline, "the copy never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shadow.received_bodies("/all")[0], body, "the copy's body");
    assert_eq!(main.received_bodies("/all")[0], body);

    for _ in 0..100 {
        assert_eq!(get(&c, &gw.url("/half")).await.status, 200);
    }
    // Copies are chosen as the originals are handled (request n when n %
    // 100 < 50), so all hundred choices are made by now; wait until the
    // gateway has counted the chosen ones answered.
    let half = r#"wasmgate_route_mirrored_total{route="half",upstream="shadow",outcome="sent"}"#;
    let answered = until_metric(&c, &gw, half, |n| n >= 50.0).await;
    assert_eq!(answered, 50.0, "exactly half");
    assert_eq!(shadow.received("/half").len(), 50, "exactly half");

    assert_eq!(get(&c, &gw.url("/dead")).await.status, 200);
    let failed = r#"wasmgate_route_mirrored_total{route="dead",upstream="gone",outcome="failed"}"#;
    until_metric(&c, &gw, failed, |n| n == 1.0).await;
    let sent = r#"wasmgate_route_mirrored_total{route="all",upstream="shadow",outcome="sent"}"#;
    assert_eq!(crate::common::gateway::metric(&c, &gw, sent).await, 1.0);

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, mirror: [{upstream: nowhere}]}]\n",
    );
    assert!(
        stderr.contains("routes[r].mirror:") && stderr.contains("routes[r].mirror[0].upstream"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_answers_locally_and_skips_the_upstream() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: fault, wasm: "{wasm:fault_injection}"}
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: fault
    plugins:
      - {plugin: fault, conf: {body: "hello world", http_status: 200}}
      - {plugin: h}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    for _ in 0..3 {
        let reply = get(&c, &gw.url("/anything")).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text(), "hello world");
        assert_eq!(reply.header("x-fault"), Some("injected"));
        // The chain ended at the local response: the next filter never ran.
        assert_eq!(reply.header("x-seen-path"), None);
    }
    assert_eq!(up.hits(), 0, "a local response skips the upstream");
}

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
    let (up, gw) = json_validation_gateway().await;
    let port = gw.port;
    for path in ["/rust", "/go"] {
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: 8\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).unwrap();
            // Long enough for a head sent on at once to reach the upstream.
            std::thread::sleep(Duration::from_millis(300));
            stream.write_all(b"not json").unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            answer
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
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
        &client(),
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

fn number(reply: &crate::common::Reply, name: &str) -> u64 {
    reply
        .header(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .parse()
        .unwrap()
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
    let first = number(&get(&c, &gw.url("/tick")).await, "x-ticks");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = number(&get(&c, &gw.url("/tick")).await, "x-ticks");
    assert!(
        later >= first + 5,
        "ticks went from {first} to {later} in 500 ms"
    );

    // Queue: every request enqueues its path; the root context drains it.
    for i in 0..5 {
        get(&c, &gw.url(&format!("/queue/{i}"))).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = get(&c, &gw.url("/queue/last")).await;
        let received = number(&reply, "x-received");
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
        assert_eq!(number(&reply, "x-requests-seen"), expected);
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
        hits.push(number(&r.await.unwrap(), "x-hits"));
    }
    hits.sort();
    // Compare-and-swap: 40 concurrent increments, none lost, none repeated.
    assert_eq!(hits, (1..=40).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_function_routes_share_the_listener() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: hello, wasm: "{wasm:hello}"}
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: hello, path: {exact: /hello}, function: {plugin: hello, function: hello}}
  - {name: filtered-hello, path: {exact: /filtered/hello}, plugins: [{plugin: h}], function: {plugin: hello}}
  - {name: rest, upstream: backend}
"#,
    )
    .await;
    let c = client();
    let reply = send(&c, "POST", &gw.url("/hello"), &[], "Ada").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Ada"}"#);
    // With a filter in front; the function is named by the last path segment.
    let reply = send(&c, "POST", &gw.url("/filtered/hello"), &[], "Grace").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Grace"}"#);
    assert_eq!(reply.header("x-seen-path"), Some("/filtered/hello"));
    let reply = get(&c, &gw.url("/other")).await;
    assert_eq!(reply.json()["upstream"], "backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancing_retries_and_health() {
    let a = Upstream::start("a").await;
    let b = Upstream::start("b").await;
    let dead = format!("127.0.0.1:{}", crate::common::free_port());
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
upstreams:
  - name: weighted
    nodes: [{{address: "{a}", weight: 3}}, {{address: "{b}", weight: 1}}]
  - name: hashed
    balance: consistent_hash
    hash_on: header
    hash_header: x-user
    nodes: [{{address: "{a}"}}, {{address: "{b}"}}]
  - name: with-dead
    retries: 1
    health_check:
      passive: {{max_failures: 1, ejection_ms: 60000}}
    nodes: [{{address: "{dead}"}}, {{address: "{b}"}}]
  - name: all-dead
    nodes: [{{address: "{dead}"}}]
  - name: slow
    read_timeout_ms: 300
    nodes: [{{address: "{a}"}}]
routes:
  - {{name: weighted, path: {{prefix: /w}}, upstream: weighted}}
  - {{name: hashed, path: {{prefix: /h}}, upstream: hashed}}
  - {{name: with-dead, path: {{prefix: /d}}, upstream: with-dead}}
  - {{name: all-dead, path: {{prefix: /x}}, upstream: all-dead}}
  - {{name: slow, path: {{prefix: /slow}}, upstream: slow}}
"#,
        a = a.address(),
        b = b.address(),
    ));
    let c = client();
    let mut counts = std::collections::HashMap::new();
    for _ in 0..40 {
        let reply = get(&c, &gw.url("/w")).await;
        *counts
            .entry(reply.json()["upstream"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert_eq!((counts["a"], counts["b"]), (30, 10), "3:1 weights");

    for user in ["ada", "grace", "linus", "barbara"] {
        let first = send(&c, "GET", &gw.url("/h"), &[("x-user", user)], "")
            .await
            .json()["upstream"]
            .clone();
        for _ in 0..5 {
            let again = send(&c, "GET", &gw.url("/h"), &[("x-user", user)], "").await;
            assert_eq!(again.json()["upstream"], first, "{user} sticks to one node");
        }
    }

    // The dead node is retried on the next one, then ejected (passive check).
    // A retried request carries the client's headers as the first attempt did.
    let before = b.hits();
    for _ in 0..6 {
        let reply = send(&c, "GET", &gw.url("/d"), &[("x-client", "kept")], "").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["upstream"], "b");
        assert_eq!(reply.json()["headers"]["x-client"], "kept");
    }
    assert_eq!(b.hits() - before, 6);

    let reply = get(&c, &gw.url("/x")).await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["error"]["kind"], "upstream_unreachable");

    let started = Instant::now();
    let reply = get(&c, &gw.url("/slow")).await;
    assert_eq!(reply.status, 504);
    assert!(started.elapsed() < Duration::from_millis(1500));
    // The gateway keeps serving after all that.
    assert_eq!(get(&c, &gw.url("/w")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_checks_take_a_node_out_and_back() {
    let a = Upstream::start("a").await;
    let b = Upstream::start("b").await;
    let b_port = b.port;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - name: pair
    retries: 0
    health_check:
      active: {{path: /health, interval_ms: 50, timeout_ms: 200, healthy_threshold: 1, unhealthy_threshold: 1}}
    nodes: [{{address: "{}"}}, {{address: "{}"}}]
routes: [{{name: all, upstream: pair}}]
"#,
        a.address(),
        b.address()
    ));
    let c = client();
    drop(b); // node b goes away
             // Out of rotation once the probes say so.
    let b_out = format!(
        "wasmgate_upstream_node_healthy{{upstream=\"pair\",node=\"127.0.0.1:{b_port}\"}} 0"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get(&c, &gw.admin_url("/metrics"))
        .await
        .text()
        .contains(&b_out)
    {
        assert!(Instant::now() < deadline, "b was never taken out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..10 {
        let reply = get(&c, &gw.url("/")).await;
        assert_eq!(reply.status, 200, "b is out of rotation: {}", reply.text());
        assert_eq!(reply.json()["upstream"], "a");
    }
}

/// A filter that traps on `/crash` (in a function of its own, which a
/// backtrace names) and otherwise adds `x-fragile: ok`.
pub(crate) const FRAGILE: &str = r#"(module
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) ":path")
  (data (i32.const 16) "x-fragile")
  (data (i32.const 32) "ok")
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32)
    (local $p i32) (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 0))) (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $get (i32.const 0) (i32.const 0) (i32.const 5) (i32.const 64) (i32.const 68)))
    ;; "/crash" is 6 bytes starting with "/c"
    (if (i32.and (i32.eq (i32.load (i32.const 68)) (i32.const 6))
                 (i32.eq (i32.load8_u (i32.add (i32.load (i32.const 64)) (i32.const 1))) (i32.const 99)))
      (then (call $explode_on_purpose)))
    (drop (call $add (i32.const 0) (i32.const 16) (i32.const 9) (i32.const 32) (i32.const 2)))
    (i32.const 0))
  (func $explode_on_purpose unreachable)
)"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_filters_fail_closed_or_open_and_are_replaced() {
    let up = Upstream::start("backend").await;
    let dir = tempfile::tempdir().unwrap();
    let fragile = dir.path().join("fragile.wat");
    std::fs::write(&fragile, FRAGILE).unwrap();
    let c = client();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
error_details: true   # the filter's callback in the answer, checked below
plugins:
  - {{name: strict, wasm: "{f}", fail: closed, pool_size: 2}}
  - {{name: lenient, wasm: "{f}", fail: open, pool_size: 2}}
upstreams: [{{name: backend, nodes: [{{address: "{up}"}}]}}]
routes:
  - {{name: closed, headers: {{x-mode: closed}}, plugins: [{{plugin: strict}}], upstream: backend}}
  - {{name: open, headers: {{x-mode: open}}, plugins: [{{plugin: lenient}}], upstream: backend}}
"#,
        f = fragile.display(),
        up = up.address()
    ));
    for _ in 0..5 {
        let r = send(&c, "GET", &gw.url("/crash"), &[("x-mode", "closed")], "").await;
        assert_eq!(r.status, 500, "{}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["kind"], "filter_failed");
        assert_eq!(error["plugin"], "strict");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("proxy_on_request_headers"));
        let r = send(&c, "GET", &gw.url("/crash"), &[("x-mode", "open")], "").await;
        assert_eq!(r.status, 200, "fail open lets it through: {}", r.text());
        assert!(r.json()["headers"].get("x-fragile").is_none());
        // Healthy requests right after a crash get a fresh instance.
        let r = send(&c, "GET", &gw.url("/fine"), &[("x-mode", "closed")], "").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["headers"]["x-fragile"], "ok");
    }
}

#[test]
fn check_explains_config_and_plugin_errors_with_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |yaml: &str| {
        let path = dir.path().join("gw.yaml");
        std::fs::write(&path, crate::common::gateway::render(yaml, 1, 2)).unwrap();
        path
    };
    let check = |path: &std::path::Path| {
        let out = wasmgate().args(["check", "-c"]).arg(path).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // A typo in a field name, with a suggestion; the problems after it are
    // reported too (the route's other reference, another route's).
    let path = write(
        "routes:\n  - name: r\n    upstrem: x\n    plugins: [{plugin: nope}]\n  - {name: s, upstream: missing}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "gw.yaml: routes[r].upstrem: unknown field `upstrem` (did you mean `upstream`?), expected one of"
        ) && stderr.contains("at line 3 column 5"),
        "{stderr}"
    );
    assert!(
        stderr.contains("gw.yaml: routes[r].plugins[0].plugin: no plugin named `nope`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("gw.yaml: routes[s].upstream: no upstream named `missing`"),
        "{stderr}"
    );
    // References, patterns, and several errors at once.
    let path = write(
        "upstreams: [{name: u, nodes: [{address: nowhere}]}]\nroutes:\n  - name: r\n    upstream: v\n    path: {regex: '('}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("upstreams[u].nodes[0].address: `nowhere` is not host:port"),
        "{stderr}"
    );
    assert!(
        stderr.contains("routes[r].upstream: no upstream named `v`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("routes[r].path.regex: invalid regex"),
        "{stderr}"
    );
    // Plugins: missing file (absolute, and relative: shown resolved against
    // the configuration's directory), not wasm, and a conf the plugin refuses.
    let path = write(
        "plugins:\n  - {name: gone, wasm: /no/such.wasm}\n  - {name: rel, wasm: mods/f.wasm}\n  - {name: cfg, wasm: \"{wasm:http_config}\"}\nroutes:\n  - {name: r, plugins: [{plugin: cfg}], respond: {}}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("plugins[gone]: cannot read /no/such.wasm"),
        "{stderr}"
    );
    let resolved = dir.path().join("mods/f.wasm");
    assert!(
        stderr.contains(&format!(
            "plugins[rel]: no file {}: `mods/f.wasm` is resolved against the configuration's directory",
            resolved.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("routes[r].plugins[0]"), "{stderr}");
    assert!(
        stderr.contains("proxy_on_configure returned false"),
        "{stderr}"
    );
    // A good one.
    let path = write(
        "plugins:\n  - {name: h, wasm: \"{wasm:add_header}\"}\n  - {name: g, wasm: \"{wasm:go_add_header}\"}\n  - {name: hello, wasm: \"{wasm:hello}\"}\nroutes:\n  - {name: r, plugins: [{plugin: h}, {plugin: g}], respond: {}}\n",
    );
    let (code, stderr, stdout) = check(&path);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("plugin h: proxy-wasm 0.2.1"), "{stdout}");
    assert!(stdout.contains("plugin g: proxy-wasm 0.2.0"), "{stdout}");
    assert!(stdout.contains("plugin hello: extism"), "{stdout}");
}

#[test]
fn bundled_example_config_checks_strictly_and_quietly() {
    // Its filters are built with the SDKs, which import every function of
    // the ABI (gRPC calls, foreign functions): nothing to warn about.
    let example = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/gateway/wasmgate.yaml");
    let out = wasmgate()
        .args(["check", "--strict", "-c"])
        .arg(&example)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("warn") && !stderr.contains("error"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok ("));
}

#[test]
fn run_without_a_file_says_how_to_name_one() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["run", "check"] {
        let out = wasmgate()
            .arg(command)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("wasmgate.yaml: cannot read")
                && stderr.contains(&format!("hint: `wasmgate {command}` reads ./wasmgate.yaml unless `-c FILE` names another")),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_admin_given_on_the_command_line_win_and_busy_ports_name_their_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    // The file's own addresses are taken: only the overrides can serve.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    std::fs::write(
        &file,
        format!("listen: {busy}\nadmin: {busy}\nroutes:\n  - {{name: r, respond: {{body: hi}}}}\n"),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        wasmgate()
            .args(["run", "--no-cache", "-c"])
            .arg(&file)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("gw.yaml: listen: cannot listen on {busy}"))
            && stderr.contains("give `--listen HOST:PORT`"),
        "{stderr}"
    );
    let listen = format!("127.0.0.1:{}", crate::common::free_port());
    let out = run(&["--listen", &listen]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("gw.yaml: admin: cannot listen on {busy}"))
            && stderr.contains("`--admin HOST:PORT`"),
        "{stderr}"
    );
    let out = run(&[
        "--listen",
        &busy,
        "--admin",
        &format!("127.0.0.1:{}", crate::common::free_port()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--listen: cannot listen on {busy}")),
        "{stderr}"
    );
    // Both given: it serves there, and a reload of the file keeps them.
    let admin = format!("127.0.0.1:{}", crate::common::free_port());
    let mut child = wasmgate()
        .args(["run", "--no-cache", "-c"])
        .arg(&file)
        .args(["--listen", &listen, "--admin", &admin])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let c = client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "not listening on {listen}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(&c, &format!("http://{listen}/")).await.text(), "hi");
    let status = send(
        &c,
        "POST",
        &format!("http://{admin}/reload"),
        &[("x-wasmgate-admin", "1")],
        "",
    )
    .await;
    assert_eq!(status.status, 200, "{}", status.text());
    assert_eq!(get(&c, &format!("http://{listen}/")).await.text(), "hi");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_describe_request_connection_route_and_response() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: props, wasm: "{wasm:properties}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: fixed
    path: {prefix: /fixed}
    plugins: [{plugin: props, conf: ["response.code_details"]}]
    respond: {status: 200, body: fixed}
  - name: inspected
    plugins:
      - plugin: props
        conf: ["response.code_details", "request.path", "request.url_path", "request.query", "request.method",
               "request.host", "request.scheme", "request.protocol", "request.id",
               "request.time:int", "request.size:int", "request.headers.x-probe",
               "response.code:int", "response.size:int", "response.headers.x-upstream",
               "source.address", "source.port:int", "destination.address",
               "destination.port:int", "connection.id:int", "connection.mtls:bool",
               "plugin_name", "plugin_root_id", "plugin_vm_id", "route_name",
               "cluster_name", "no.such.property"]
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let r = send(
        &c,
        "POST",
        &gw.url("/a/b?x=1"),
        &[("x-probe", "p1")],
        "12345",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let p = |name: &str| {
        r.header(&format!("x-property-{name}"))
            .unwrap_or_else(|| panic!("no header for {name}"))
            .to_string()
    };
    let gw_port = gw.url("").rsplit(':').next().unwrap().to_string();
    assert_eq!(p("request.path"), "/a/b?x=1");
    assert_eq!(p("request.url_path"), "/a/b");
    assert_eq!(p("request.query"), "x=1");
    assert_eq!(p("request.method"), "POST");
    assert_eq!(p("request.host"), format!("127.0.0.1:{gw_port}"));
    assert_eq!(p("request.scheme"), "http");
    assert_eq!(p("request.protocol"), "HTTP/1.1");
    assert_eq!(p("request.id").len(), 16);
    let time: i64 = p("request.time").parse().unwrap();
    assert!(
        (before - 1_000_000_000..before + 60_000_000_000).contains(&time),
        "{time}"
    );
    assert_eq!(p("request.size"), "5");
    assert_eq!(p("request.headers.x-probe"), "p1");
    assert_eq!(p("response.code"), "200");
    assert_eq!(p("response.size"), r.body.len().to_string());
    assert_eq!(p("response.headers.x-upstream"), "backend");
    assert!(p("source.address").starts_with("127.0.0.1:"));
    let source_port: u16 = p("source.port").parse().unwrap();
    assert!(p("source.address").ends_with(&format!(":{source_port}")));
    assert_eq!(p("destination.address"), format!("127.0.0.1:{gw_port}"));
    assert_eq!(p("destination.port"), gw_port);
    assert!(p("connection.id").parse::<u64>().unwrap() >= 1);
    assert_eq!(p("connection.mtls"), "false");
    assert_eq!(p("plugin_name"), "props");
    assert_eq!(p("plugin_vm_id"), "props");
    assert_eq!(p("route_name"), "inspected");
    // Envoy's and Higress's form, which Higress's `_match_service_` parses.
    let up_port = up.address().rsplit_once(':').unwrap().1.to_string();
    assert_eq!(p("cluster_name"), format!("outbound|{up_port}||backend"));
    assert_eq!(p("no.such.property"), "<absent>");
    // Where the answer came from, in Envoy's words.
    assert_eq!(p("response.code_details"), "via_upstream");
    let fixed = send(&c, "GET", &gw.url("/fixed"), &[], "").await;
    assert_eq!(
        fixed.header("x-property-response.code_details"),
        Some("direct_response")
    );
    // Each request gets its own id.
    let again = send(&c, "POST", &gw.url("/a/b?x=1"), &[], "").await;
    let id = again.header("x-property-request.id").unwrap();
    assert_ne!(id, p("request.id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_through_the_filter() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: trailers, wasm: "{wasm:trailers}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: filtered, path: {prefix: /filtered}, plugins: [{plugin: trailers}], upstream: backend}
  - {name: plain, upstream: backend}
"#,
    )
    .await;
    let c = client();
    let te = [("te", "trailers")];
    // Unfiltered: the upstream's trailers reach the client.
    let plain = send(&c, "GET", &gw.url("/trailers"), &te, "").await;
    assert_eq!(plain.text(), "part1 part2");
    let trailers = plain.trailers.expect("trailers through the plain route");
    assert_eq!(trailers["x-checksum"], "abc123");
    // Filtered: proxy_on_response_trailers sees them and rewrites one.
    let filtered = send(&c, "GET", &gw.url("/filtered/trailers"), &te, "").await;
    assert_eq!(filtered.status, 200);
    assert_eq!(filtered.text(), "part1 part2");
    let trailers = filtered.trailers.expect("trailers through the filter");
    assert_eq!(trailers["x-checksum"], "abc123; seen-by=filter; trailers=1");
    // A client that did not say `TE: trailers` gets the body without them.
    let without = get(&c, &gw.url("/filtered/trailers")).await;
    assert_eq!(without.text(), "part1 part2");
    assert!(without.trailers.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_pass_through_the_filter() {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: trailers, wasm: "{wasm:trailers}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: filtered, plugins: [{plugin: trailers}], upstream: backend}
"#,
    )
    .await;
    // A chunked request body that ends with a trailer it declares.
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("x-checksum", "req-42".parse().unwrap());
    let body = StreamBody::new(crate::common::upstream::frames_stream([
        Frame::data(bytes::Bytes::from("one ")),
        Frame::data(bytes::Bytes::from("two")),
        Frame::trailers(trailers),
    ]));
    let request = hyper::Request::post(gw.url("/upload"))
        .header("trailer", "x-checksum")
        .body(body)
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let response = client.request(request).await.unwrap();
    let reply = crate::common::Reply::read(response).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["body"], "one two");
    assert_eq!(
        echo["trailers"]["x-checksum"], "req-42; seen-by=filter; trailers=1",
        "{echo}"
    );
}

/// A raw HTTP/1.1 upstream that counts its connections and, when
/// `close_after_each` is set, closes each one right after its first answer
/// (as a node whose keep-alive timeout is shorter than the gateway's does).
/// Answers `/chunked` chunked, `/empty` with 204, anything else with a
/// length.
async fn counting_upstream(close_after_each: bool) -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&pending[..end]).into_owned();
                    pending.drain(..end + 4);
                    let path = head.split(' ').nth(1).unwrap_or("/");
                    let answer: &[u8] = match path {
                        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                        "/empty" => b"HTTP/1.1 204 No Content\r\n\r\n",
                        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                    };
                    if stream.write_all(answer).await.is_err() || close_after_each {
                        return;
                    }
                }
            });
        }
    });
    (port, connections)
}

/// Sequential requests share one upstream connection whatever the framing
/// of their answers; a connection the node closes while it is idle is
/// replaced without the next request failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_and_replaced_when_the_node_closes_them() {
    let (keeping, kept) = counting_upstream(false).await;
    let (closing, closed) = counting_upstream(true).await;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - {{name: keeping, nodes: [{{address: "127.0.0.1:{keeping}"}}], retries: 0}}
  - {{name: closing, nodes: [{{address: "127.0.0.1:{closing}"}}], retries: 0}}
routes:
  - {{name: closing, path: {{prefix: /closing/}}, upstream: closing}}
  - {{name: keeping, upstream: keeping}}
"#
    ));
    let c = client();
    for round in 0..10 {
        for (path, status, body) in [
            ("/length", 200, "ok"),
            ("/chunked", 200, "ok"),
            ("/empty", 204, ""),
        ] {
            let reply = get(&c, &gw.url(path)).await;
            assert_eq!(reply.status, status, "round {round} {path}");
            assert_eq!(reply.text(), body, "round {round} {path}");
        }
    }
    // One connection, or two: a connection returns to its pool once the
    // gateway has read its answer's end, which the client's next request
    // can overtake on a busy machine (a full parallel run saw it).
    let connections = kept.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&connections),
        "30 requests, {connections} connections"
    );
    let open = format!(
        r#"wasmgate_upstream_node_connections{{upstream="closing",node="127.0.0.1:{closing}"}}"#
    );
    for round in 0..5 {
        let reply = get(&c, &gw.url("/closing/x")).await;
        assert_eq!(reply.status, 200, "round {round}: {}", reply.text());
        // The node's close reaches the gateway before the next request.
        until_metric(&c, &gw, &open, |n| n == 0.0).await;
    }
    assert_eq!(closed.load(Ordering::SeqCst), 5);
}

/// CORS: a preflight from an allowed origin (exact or `*.` wildcard) is
/// answered by the gateway with what the route allows, never reaching the
/// upstream; answers to allowed origins carry the origin, credentials and
/// exposed headers (and `Vary: Origin`); another
/// origin, or none, gets nothing added. With `*` origins and no
/// credentials the answer says `*`. `check` refuses an origin that is not
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_and_allowed_origins_marked() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: app
    path: {prefix: /app}
    cors:
      allow_origins: ["https://app.example.com", "https://*.example.org"]
      allow_methods: [GET, PUT]
      allow_headers: [x-token]
      expose_headers: [x-trace]
      max_age_seconds: 600
      allow_credentials: true
    upstream: backend
  - name: public
    path: {prefix: /public}
    cors: {allow_origins: ["*"], allow_methods: ["*"], allow_headers: ["*"]}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let preflight = send(
        &c,
        "OPTIONS",
        &gw.url("/app/items"),
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-token"),
        ],
        "",
    )
    .await;
    assert_eq!(preflight.status, 204, "{}", preflight.text());
    let got = |reply: &crate::common::Reply, name: &str| {
        reply.header(name).unwrap_or_default().to_string()
    };
    assert_eq!(
        got(&preflight, "access-control-allow-origin"),
        "https://app.example.com"
    );
    assert_eq!(got(&preflight, "access-control-allow-methods"), "GET, PUT");
    assert_eq!(got(&preflight, "access-control-allow-headers"), "x-token");
    assert_eq!(got(&preflight, "access-control-max-age"), "600");
    assert_eq!(got(&preflight, "access-control-allow-credentials"), "true");
    assert_eq!(up.hits(), 0, "a preflight never reaches the upstream");

    let reply = send(
        &c,
        "GET",
        &gw.url("/app/items"),
        &[("origin", "https://shop.example.org")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        got(&reply, "access-control-allow-origin"),
        "https://shop.example.org"
    );
    assert_eq!(got(&reply, "access-control-expose-headers"), "x-trace");
    assert_eq!(got(&reply, "access-control-allow-credentials"), "true");
    assert!(
        got(&reply, "vary").contains("Origin"),
        "{:?}",
        reply.headers
    );
    for origin in [
        "https://evil.example",
        "https://example.org",
        "http://app.example.com",
    ] {
        let reply = send(&c, "GET", &gw.url("/app/items"), &[("origin", origin)], "").await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.header("access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    // Another origin's preflight is the upstream's to answer.
    let hits = up.hits();
    let other = send(
        &c,
        "OPTIONS",
        &gw.url("/app/items"),
        &[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "PUT"),
        ],
        "",
    )
    .await;
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert_eq!(up.hits(), hits + 1);
    let reply = get(&c, &gw.url("/app/items")).await;
    assert_eq!(
        reply.header("access-control-allow-origin"),
        None,
        "no Origin, no CORS"
    );

    let public = send(
        &c,
        "OPTIONS",
        &gw.url("/public"),
        &[
            ("origin", "https://any.example"),
            ("access-control-request-method", "DELETE"),
        ],
        "",
    )
    .await;
    assert_eq!(public.status, 204);
    assert_eq!(got(&public, "access-control-allow-origin"), "*");
    assert_eq!(got(&public, "access-control-allow-methods"), "*");
    assert_eq!(got(&public, "access-control-max-age"), "5");

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, cors: {allow_origins: [app.example.com]}}]\n",
    );
    assert!(stderr.contains("routes[r].cors.allow_origins"), "{stderr}");
}
