//! Clients that misbehave at the HTTP level, over raw TCP: a silent
//! connection, a head or a body that stalls, broken chunked framing. Each gets its
//! status (or a closed connection) in bounded time, and none of it counts
//! against the upstream's health.

use std::time::{Duration, Instant};

use crate::common::gateway::{get, with_upstream};
use crate::common::{client, raw_exchange};

/// Writes `request` and reads until the gateway closes or 10 s pass;
/// returns what came back and how long it took.
fn exchange(port: u16, request: &[u8]) -> (String, Duration) {
    let started = Instant::now();
    let answer = raw_exchange(port, request, Duration::from_secs(10)).expect("connecting");
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_silent_and_malformed_clients_get_their_status_in_bounded_time() {
    let (backend, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
limits: {header_read_timeout_ms: 1000, body_read_timeout_ms: 1000}
plugins:
  - {name: faults, wasm: "{wasm:faults}"}
upstreams:
  - name: backend
    nodes: [{address: "{backend}"}]
    health_check: {passive: {max_failures: 2, ejection_ms: 60000}}
routes:
  - {name: fn, path: {prefix: /fn/}, function: {plugin: faults}}
  - {name: up, path: {prefix: /up}, upstream: backend}
"#,
    )
    .await;
    let port = gw.port;
    let (silent, half_head, kept_alive, stalled, malformed) = tokio::task::spawn_blocking(move || {
        // Connects and says nothing: closed after the header read timeout.
        let silent = exchange(port, b"");
        // Sends half a request head, then waits: 408 after the header read timeout.
        let half_head = exchange(port, b"GET /up HTTP/1.1\r\nhost: x\r\n");
        // A whole request, then silence: its answer, then closed, with no 408.
        let kept_alive = exchange(port, b"GET /up HTTP/1.1\r\nhost: x\r\n\r\n");
        // Announces 100 bytes, sends 3, then waits.
        let stalled = exchange(
            port,
            b"POST /fn/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc",
        );
        // Chunk sizes must be hex; three times, past the passive threshold.
        let bad = b"POST /up HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";
        let malformed: Vec<_> = (0..3).map(|_| exchange(port, bad)).collect();
        (silent, half_head, kept_alive, stalled, malformed)
    })
    .await
    .unwrap();

    assert_eq!(silent.0, "", "nothing is sent to a silent client");
    assert!(
        silent.1 >= Duration::from_millis(900) && silent.1 < Duration::from_secs(5),
        "closed after {:?}",
        silent.1
    );
    assert!(half_head.0.starts_with("HTTP/1.1 408"), "{}", half_head.0);
    assert!(
        half_head.1 >= Duration::from_millis(900) && half_head.1 < Duration::from_secs(5),
        "answered after {:?}",
        half_head.1
    );
    assert!(kept_alive.0.starts_with("HTTP/1.1 200"), "{}", kept_alive.0);
    assert!(!kept_alive.0.contains("408"), "{}", kept_alive.0);
    assert!(
        kept_alive.1 >= Duration::from_millis(900) && kept_alive.1 < Duration::from_secs(5),
        "closed after {:?}",
        kept_alive.1
    );
    assert!(stalled.0.starts_with("HTTP/1.1 408"), "{}", stalled.0);
    assert!(
        stalled.1 < Duration::from_secs(5),
        "answered after {:?}",
        stalled.1
    );
    for (answer, took) in &malformed {
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(*took < Duration::from_secs(5));
    }
    // The client's faults did not eject the healthy node.
    let c = client();
    let scrape = get(&c, &gw.admin_url("/metrics")).await.text();
    let healthy = format!(
        r#"wasmgate_upstream_node_healthy{{upstream="backend",node="{}"}} 1"#,
        backend.address()
    );
    assert!(scrape.contains(&healthy), "{scrape}");
    assert_eq!(get(&c, &gw.url("/up")).await.status, 200);
}
