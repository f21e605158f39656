//! `proxy_grpc_call` and `proxy_grpc_stream` from a filter built with the
//! Proxy-Wasm Rust SDK (plugins/proxy-wasm/rust/grpc_call) to a real gRPC
//! server (grpcio, tests/protocols/grpc_peer.py) behind an h2c upstream:
//! replies, statuses with their messages, metadata, deadlines, cancelled
//! calls, an upstream that is down or unknown; streams of every kind with
//! their metadata, messages in order, statuses, half-close and cancel.

use crate::common::gateway::{send, GatewayProc};
use crate::common::peers::Peer;
use crate::common::{client, HttpClient};

fn config(grpc: &str, conf: &str) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: caller, wasm: "{{wasm:grpc_call}}"}}
upstreams:
  - {{name: echo, protocol: h2c, nodes: [{{address: "{grpc}"}}]}}
  - {{name: down, protocol: h2c, nodes: [{{address: "127.0.0.1:9"}}], retries: 0}}
routes:
  - {{name: call, path: {{prefix: /}}, plugins: [{{plugin: caller, conf: {conf}}}], respond: {{body: not-called}}}}
"#
    )
}

/// (status, x-grpc-status, body) of one request with `headers`.
async fn call(c: &HttpClient, gw: &GatewayProc, headers: &[(&str, &str)]) -> (u16, String, String) {
    let reply = send(c, "GET", &gw.url("/"), headers, "").await;
    let grpc_status = reply
        .header("x-grpc-status")
        .unwrap_or_default()
        .to_string();
    (reply.status, grpc_status, reply.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_calls_a_grpc_method_and_answers_with_its_reply_or_status() {
    let peer = Peer::serve("grpc_peer.py", &[]);
    let gw = GatewayProc::start(&config(&peer.address(), "echo"));
    let c = client();

    // A reply.
    let (status, grpc, body) = call(&c, &gw, &[("x-grpc-message", "hello over grpc")]).await;
    assert_eq!(
        (status, grpc.as_str(), body.as_str()),
        (200, "0", "hello over grpc")
    );

    // Initial metadata reaches the server.
    let (status, _, body) = call(
        &c,
        &gw,
        &[
            ("x-grpc-message", "metadata"),
            ("x-grpc-meta", "from-the-filter"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["x-meta"], "from-the-filter", "{seen}");

    // A status with its message (INVALID_ARGUMENT, 3).
    let (status, grpc, body) = call(&c, &gw, &[("x-grpc-message", "fail")]).await;
    assert_eq!(
        (status, grpc.as_str(), body.as_str()),
        (502, "3", "told to fail")
    );

    // The call's deadline passes first: DEADLINE_EXCEEDED (4).
    let (status, grpc, _) = call(
        &c,
        &gw,
        &[
            ("x-grpc-message", "sleep:2000"),
            ("x-grpc-timeout-ms", "200"),
        ],
    )
    .await;
    assert_eq!((status, grpc.as_str()), (502, "4"));

    // A cancelled call is never answered: the first call (an immediate
    // echo) would come back before the second (which sleeps) otherwise.
    let (status, grpc, body) = call(
        &c,
        &gw,
        &[
            ("x-grpc-cancel-first", "yes"),
            ("x-grpc-first", "first"),
            ("x-grpc-message", "sleep:300"),
        ],
    )
    .await;
    assert_eq!(
        (status, grpc.as_str(), body.as_str()),
        (200, "0", "sleep:300")
    );

    // The server keeps answering after all that.
    let (status, _, body) = call(&c, &gw, &[("x-grpc-message", "again")]).await;
    assert_eq!((status, body.as_str()), (200, "again"));
    // The SDK-built filter never hit an unexpected status (it panics on one).
    assert!(!gw.logs().contains("panicked"), "{}", gw.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_is_unavailable_and_an_unknown_one_is_refused_at_dispatch() {
    let peer = Peer::serve("grpc_peer.py", &[]);
    let c = client();
    let gw = GatewayProc::start(&config(&peer.address(), "down"));
    let (status, grpc, _) = call(&c, &gw, &[("x-grpc-message", "x")]).await;
    assert_eq!((status, grpc.as_str()), (502, "14"), "UNAVAILABLE");
    drop(gw);
    // Not an upstream: ParseFailure, which the SDK returns as an error.
    let gw = GatewayProc::start(&config(&peer.address(), "nowhere"));
    let (status, _, body) = call(&c, &gw, &[("x-grpc-message", "x")]).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("ParseFailure"), "{body}");
}

/// The lines the filter answers once a stream to `method` closed.
async fn stream(c: &HttpClient, gw: &GatewayProc, headers: &[(&str, &str)]) -> Vec<String> {
    let reply = send(c, "GET", &gw.url("/"), headers, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text().lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_streams_to_a_grpc_method_and_hears_every_message_in_order() {
    let peer = Peer::serve("grpc_peer.py", &[]);
    let gw = GatewayProc::start(&config(&peer.address(), "echo"));
    let c = client();
    let ok = |messages: &[&str]| -> Vec<String> {
        let mut lines = vec!["initial content-type=application/grpc".to_string()];
        lines.extend(messages.iter().map(|m| format!("message {m}")));
        lines.push("trailing ".into());
        lines.push("close 0 ".into());
        lines
    };

    // Bidirectional: every message back, in order; the filter ends its side
    // with the last message.
    let bidi = [("x-grpc-stream", "Bidi"), ("x-grpc-messages", "a,bb,ccc")];
    assert_eq!(stream(&c, &gw, &bidi).await, ok(&["a", "bb", "ccc"]));
    // ... or with proxy_grpc_close after the messages.
    let closed = [
        ("x-grpc-stream", "Bidi"),
        ("x-grpc-messages", "x,y"),
        ("x-grpc-end", "close"),
    ];
    assert_eq!(stream(&c, &gw, &closed).await, ok(&["x", "y"]));

    // Server streaming: one request, many answers.
    let server = [("x-grpc-stream", "ServerStream"), ("x-grpc-messages", "4")];
    assert_eq!(stream(&c, &gw, &server).await, ok(&["0", "1", "2", "3"]));

    // Client streaming: many requests, one answer counting them.
    let client_side = [
        ("x-grpc-stream", "ClientStream"),
        ("x-grpc-messages", "ab,cd,ef"),
    ];
    assert_eq!(
        stream(&c, &gw, &client_side).await,
        ok(&[r#"{"count": 3, "bytes": 6}"#])
    );

    // A server's error status, with its message and trailing metadata
    // (the unary method refusing, called as a stream).
    let failing = [("x-grpc-stream", "Unary"), ("x-grpc-messages", "fail")];
    let lines = stream(&c, &gw, &failing).await;
    assert_eq!(lines.last().unwrap(), "close 3 told to fail", "{lines:?}");
    assert!(
        lines.contains(&"trailing x-trailer=yes".to_string()),
        "{lines:?}"
    );

    // A cancelled stream is never heard from again, while a second one on
    // the same request is.
    let cancel = [
        ("x-grpc-stream", "Bidi"),
        ("x-grpc-messages", "p,q"),
        ("x-grpc-cancel-first", "yes"),
    ];
    assert_eq!(stream(&c, &gw, &cancel).await, ok(&["p", "q"]));

    // A stream to a method the server lacks: UNIMPLEMENTED (12).
    let missing = [("x-grpc-stream", "Nope"), ("x-grpc-messages", "z")];
    let lines = stream(&c, &gw, &missing).await;
    assert!(lines.last().unwrap().starts_with("close 12 "), "{lines:?}");
    assert!(!gw.logs().contains("panicked"), "{}", gw.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_to_an_upstream_that_is_down_closes_unavailable() {
    let peer = Peer::serve("grpc_peer.py", &[]);
    let gw = GatewayProc::start(&config(&peer.address(), "down"));
    let c = client();
    let lines = stream(
        &c,
        &gw,
        &[("x-grpc-stream", "Bidi"), ("x-grpc-messages", "a")],
    )
    .await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("close 14 "), "{lines:?}");
    drop(gw);
    // Not an upstream: the SDK's open fails with ParseFailure.
    let gw = GatewayProc::start(&config(&peer.address(), "nowhere"));
    let reply = send(&c, "GET", &gw.url("/"), &[("x-grpc-stream", "Bidi")], "").await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert!(reply.text().contains("ParseFailure"), "{}", reply.text());
}

/// How many guest calls plugin `caller` has made, its routes' and its root
/// context's (ticks included) together.
async fn guest_calls(c: &HttpClient, gw: &GatewayProc) -> f64 {
    let metrics = send(c, "GET", &gw.admin_url("/metrics"), &[], "").await;
    let series = r#"wasmgate_plugin_call_seconds_count{plugin="caller","#;
    (metrics.text().lines())
        .filter(|line| line.starts_with(series))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_context_keeps_a_stream_open_and_hears_on_it() {
    let peer = Peer::serve("grpc_peer.py", &[]);
    let gw = GatewayProc::start(&config(&peer.address(), "'echo root-stream'"));
    let c = client();
    let heard = || async {
        let reply = send(&c, "GET", &gw.url("/"), &[("x-grpc-root", "yes")], "").await;
        reply.text()
    };
    // The root opens the stream on its first tick; its echo comes back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let first = loop {
        let text = heard().await;
        if !text.is_empty() || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(first, "message from-root\n", "{}", gw.logs());
    // The stream stays open (no close is heard) while the root lives on:
    // 25 more of its 20 ms ticks, each a guest call (and no request made
    // meanwhile), are time for a stream the gateway ended to say so.
    let before = guest_calls(&c, &gw).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while guest_calls(&c, &gw).await < before + 25.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the root stopped ticking"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(heard().await, "message from-root\n", "{}", gw.logs());
}
