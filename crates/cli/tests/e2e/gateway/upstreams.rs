//! Upstream nodes: load balancing, retries, passive and active health
//! checks, and connections reused until a node closes them.

use crate::common::client;
use crate::common::gateway::{get, send, until_metric, GatewayProc};
use crate::common::upstream::Upstream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// A node that closes a kept connection just as a request arrives on it
/// (the race of every keep-alive client, made certain here: it answers the
/// first request on each connection and closes on the second unanswered).
/// A bodiless GET, which the gateway may send again, goes again on a new
/// connection; a POST, which the node may have acted on, does not
/// (docs/gateway.md, "Upstreams").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_to_a_closing_connection_is_resent_only_if_idempotent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                for answered in [true, false] {
                    while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                        }
                    }
                    pending.clear();
                    counter.fetch_add(1, Ordering::SeqCst);
                    if answered {
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
upstreams:
  - {{name: closing, nodes: [{{address: "127.0.0.1:{port}"}}], retries: 0}}
routes:
  - {{name: all, upstream: closing}}
"#
    ));
    let c = client();
    let first = get(&c, &gw.url("/first")).await;
    assert_eq!((first.status, first.text().as_str()), (200, "ok"));
    let resent = get(&c, &gw.url("/resent")).await;
    assert_eq!(resent.status, 200, "{}", resent.text());
    assert_eq!(
        requests.load(Ordering::SeqCst),
        3,
        "the GET reached the node twice: on the closing connection and on a new one"
    );
    let post = send(&c, "POST", &gw.url("/not-resent"), &[], "").await;
    assert_eq!(post.status, 502, "{}", post.text());
    assert_eq!(requests.load(Ordering::SeqCst), 4, "the POST went once");
}
