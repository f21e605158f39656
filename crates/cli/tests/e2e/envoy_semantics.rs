//! Envoy's HTTP filter semantics, which Higress's and Istio's plugins are
//! written against (docs/gateway.md, "The filter chain"), tried with two of
//! Higress's own plugins built unchanged from its sources
//! (plugins/third_party/higress-plugins/) and a Rust SDK filter that
//! reports what it reads (`properties`):
//!
//! - a local reply goes through the filters' response callbacks (cors adds
//!   its `access-control-*` headers to its own preflight answer there);
//! - response callbacks run in reverse chain order (the last filter sees the
//!   response first);
//! - a filter that stops the headers (`HeaderStopIteration`) still gets the
//!   body, and the headers it edits from the body are the ones sent, on the
//!   request (to the upstream) and on the response (to the client);
//! - `response.code_details` says whether the answer came from the upstream
//!   (`via_upstream`) or a local reply (its details);
//! - a response that comes whole, whose callbacks the host makes in one
//!   guest call, meets the filter as one whose body comes later.

use crate::common::client;
use crate::common::gateway::{get, metric, send, with_upstream};

const ORIGIN: &str = "http://app.example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_cors_answers_preflights_with_its_headers_through_the_response_callbacks() {
    let (upstream, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: cors, wasm: "{wasm:higress_plugin_cors}"}
  - {name: props, wasm: "{wasm:properties}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - name: api
    plugins:
      - {plugin: props, conf: ["response.code_details", "response.headers.access-control-allow-origin"]}
      - plugin: cors
        conf: {allow_origins: ["http://app.example.com"], allow_methods: [GET, POST], allow_headers: [Content-Type, Token], expose_headers: [x-upstream], allow_credentials: true, max_age: 600}
    upstream: backend
"#,
    )
    .await;
    let c = client();

    // The preflight: cors answers it itself, and adds its headers to that
    // answer in proxy_on_response_headers; the filter before it sees the
    // reply too, after cors (reverse order), with the reply's details.
    let preflight = send(
        &c,
        "OPTIONS",
        &gw.url("/orders"),
        &[
            ("origin", ORIGIN),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "Content-Type,Token"),
        ],
        "",
    )
    .await;
    assert_eq!(preflight.status, 200, "{}", preflight.text());
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some(ORIGIN)
    );
    let methods = preflight
        .header("access-control-allow-methods")
        .unwrap_or_default();
    assert!(methods.contains("POST"), "{:?}", preflight.headers);
    assert_eq!(preflight.header("access-control-max-age"), Some("600"));
    assert_eq!(
        preflight.header("access-control-allow-credentials"),
        Some("true")
    );
    // The trace header of its local reply is removed by its own response
    // callback.
    assert_eq!(preflight.header("x-cors-plugin-trace"), None);
    assert_eq!(
        preflight.header("x-property-response.code_details"),
        Some("cores.preflight")
    );
    assert_eq!(
        preflight.header("x-property-response.headers.access-control-allow-origin"),
        Some(ORIGIN),
        "the response callbacks run in reverse order: cors before props"
    );
    assert_eq!(upstream.hits(), 0, "a preflight never reaches the upstream");

    // A CORS request goes to the upstream; its answer carries the headers.
    let simple = send(&c, "GET", &gw.url("/orders"), &[("origin", ORIGIN)], "").await;
    assert_eq!(simple.status, 200, "{}", simple.text());
    assert_eq!(simple.json()["upstream"], "backend");
    assert_eq!(simple.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(
        simple.header("access-control-expose-headers"),
        Some("x-upstream")
    );
    assert_eq!(
        simple.header("x-property-response.code_details"),
        Some("via_upstream")
    );

    // An origin it does not allow: its 403, through the response callbacks.
    let refused = send(
        &c,
        "GET",
        &gw.url("/orders"),
        &[("origin", "http://evil.example.net")],
        "",
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(refused.text(), "Invalid CORS request");
    assert_eq!(
        refused.header("x-property-response.code_details"),
        Some("cors.forbidden")
    );
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_transformer_maps_bodies_into_headers_it_holds() {
    let (upstream, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: transformer, wasm: "{wasm:higress_plugin_transformer}"}
  - {name: props, wasm: "{wasm:properties}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - name: api
    plugins:
      - plugin: transformer
        conf:
          reqRules:
            - {operate: map, mapSource: body, headers: [{fromKey: userId, toKey: x-user-id}]}
          respRules:
            - {operate: map, mapSource: body, headers: [{fromKey: upstream, toKey: x-served-by}]}
      - {plugin: props, conf: ["request.headers.x-user-id"]}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let body = r#"{"userId": 12, "userName": "ada"}"#;
    let reply = send(
        &c,
        "POST",
        &gw.url("/json/users"),
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // The request's headers waited at the transformer while it read the
    // body; the header it added from the body went upstream with them, and
    // the filter after it saw them only then.
    let seen = &upstream.received("/json/users")[0];
    assert_eq!(seen.get("x-user-id").unwrap(), "12");
    assert_eq!(reply.json()["body"], body, "the body itself goes on whole");
    assert_eq!(
        reply.header("x-property-request.headers.x-user-id"),
        Some("12")
    );
    // The response's headers waited for its body the same way: the header
    // mapped from the upstream's JSON answer reaches the client.
    assert_eq!(reply.header("x-served-by"), Some("backend"));

    // Without a body there is nothing to wait for: the request goes on.
    let reply = send(&c, "GET", &gw.url("/json/plain"), &[], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(upstream.received("/json/plain")[0]
        .get("x-user-id")
        .is_none());
}

/// On a route of one filter, a response whose body came with its head has
/// its response callbacks and the stream's end made in one guest call
/// (batch.rs); the filter must see nothing of it: the same answer as when
/// the body comes later and the host makes each call alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_response_meets_its_filter_as_one_that_comes_in_pieces() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: body, wasm: "{wasm:http_body}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes: [{name: all, plugins: [{plugin: body}], upstream: backend}]
"#,
    )
    .await;
    let c = client();
    let series = r#"wasmgate_plugin_call_seconds_count{plugin="body",route="all"}"#;
    // A first request makes the series (and the instance).
    assert_eq!(get(&c, &gw.url("/secret")).await.status, 200);
    let before = metric(&c, &gw, series).await;
    let whole = get(&c, &gw.url("/secret")).await;
    let after = metric(&c, &gw, series).await;
    let late = get(&c, &gw.url("/secret/late")).await;
    let last = metric(&c, &gw, series).await;
    for reply in [&whole, &late] {
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text(), "Original message body (24 bytes) redacted.\n");
    }
    // The request's guest call (context and headers) and the response's one.
    assert_eq!(after - before, 2.0, "guest calls for a whole response");
    // Apart: the response's headers, its body (in one or more calls) and
    // the stream's end each alone.
    assert!(
        last - after >= 4.0,
        "guest calls for a late body: {}",
        last - after
    );
}
