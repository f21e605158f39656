//! Connection hygiene (docs/security.md, "Connections"): idle HTTP/2
//! connections are closed, each listener holds at most `max_connections`,
//! and HTTP/2 floods (canceled streams, rapid reset, CONTINUATION) close the
//! offending connection while everyone else is served. The clients write
//! HTTP/2 frames by hand on real sockets, as an attacker's would.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::client;
use crate::common::gateway::{metric, send, until_metric, with_upstream, GatewayProc};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A GET of `path` as an HPACK block: `:method GET`, `:scheme http` from the
/// static table, `:path` and `:authority` as literals.
fn get(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    block
}

/// An h2c connection that sent its preface and an empty SETTINGS frame.
async fn h2c(port: u16) -> TcpStream {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.write_all(&[PREFACE, &frame(SETTINGS, 0, 0, &[])].concat())
        .await
        .unwrap();
    tcp
}

/// Reads until the peer closes (true) or `within` passes (false),
/// discarding what comes (SETTINGS, GOAWAY, responses).
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_busy_ones_are_not() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
limits: {header_read_timeout_ms: 1000, http2_idle_timeout_ms: 1500}
routes:
  - {name: all, path: {prefix: /}, respond: {status: 200, body: "hello"}}
"#,
    );
    let c = client();
    // Clients that sent the preface and went quiet, and clients that sent
    // one request and went quiet.
    let started = Instant::now();
    let mut quiet = Vec::new();
    for i in 0..100u32 {
        let mut tcp = h2c(gw.port).await;
        if i % 2 == 1 {
            tcp.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get("/")))
                .await
                .unwrap();
        }
        quiet.push(tcp);
    }
    // A client that keeps sending requests, one every 500 ms (inside the
    // idle timeout each time), for 3 s: kept.
    let busy = tokio::spawn(async move {
        let port = gw.port;
        let mut tcp = h2c(port).await;
        let mut stream = 1;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            tcp.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, stream, &get("/")))
                .await
                .unwrap();
            stream += 2;
            if closed_within(&mut tcp, Duration::from_millis(500)).await {
                return (gw, false);
            }
        }
        (gw, true)
    });
    for tcp in &mut quiet {
        assert!(
            closed_within(tcp, Duration::from_secs(10)).await,
            "an idle HTTP/2 connection was kept"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "closed after {took:?}, with a 1.5 s idle timeout"
    );
    let (gw, kept) = busy.await.unwrap();
    assert!(kept, "a connection with a request every 500 ms was closed");
    assert!(
        until_metric(
            &c,
            &gw,
            &format!(
                "wasmgate_listener_connections_closed_total{{listener=\"127.0.0.1:{}\",reason=\"http2_idle_timeout\"}}",
                gw.port
            ),
            |n| n >= 100.0,
        )
        .await
            <= 101.0
    );
    // Nothing is left open (the busy client closed its own).
    until_metric(
        &c,
        &gw,
        &format!(
            "wasmgate_listener_connections{{listener=\"127.0.0.1:{}\"}}",
            gw.port
        ),
        |n| n == 0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_holds_at_most_max_connections() {
    let gw = GatewayProc::start(
        r#"
admin: "{admin}"
listeners:
  - {address: "{listen}", max_connections: 5}
routes:
  - {name: all, path: {prefix: /}, respond: {status: 200, body: "hello"}}
"#,
    );
    let c = client();
    let series = |name: &str| format!("{name}{{listener=\"127.0.0.1:{}\"}}", gw.port);
    // The start-up probe's connection is gone first (else it holds a slot).
    until_metric(&c, &gw, &series("wasmgate_listener_connections"), |n| {
        n == 0.0
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap());
    }
    until_metric(&c, &gw, &series("wasmgate_listener_connections"), |n| {
        n == 5.0
    })
    .await;
    // The sixth is accepted by the kernel and closed by the gateway at once.
    let mut sixth = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let _ = sixth.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(closed_within(&mut sixth, Duration::from_secs(2)).await);
    assert_eq!(
        metric(
            &c,
            &gw,
            &series("wasmgate_listener_connections_refused_total")
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(&c, &gw, &series("wasmgate_listener_max_connections")).await,
        5.0
    );
    // One leaves, and a new client is served.
    held.pop();
    until_metric(&c, &gw, &series("wasmgate_listener_connections"), |n| {
        n == 4.0
    })
    .await;
    let reply = send(
        &c,
        "GET",
        &format!("http://127.0.0.1:{}/", gw.port),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_floods_close_the_connection_and_everyone_else_is_served() {
    let (_upstream, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - {name: all, path: {prefix: /}, upstream: backend}
"#,
    )
    .await;
    let c = client();
    let closed = |reason: &str| {
        format!(
            "wasmgate_listener_connections_closed_total{{listener=\"127.0.0.1:{}\",reason=\"{reason}\"}}",
            gw.port
        )
    };

    // Canceled streams: 120 requests to an upstream that answers after 2 s,
    // each canceled once the gateway has taken it up.
    let mut tcp = h2c(gw.port).await;
    let requests: Vec<u8> = (0..120u32)
        .flat_map(|i| frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, &get("/slow")))
        .collect();
    tcp.write_all(&requests).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resets: Vec<u8> = (0..120u32)
        .flat_map(|i| frame(RST_STREAM, 0, 1 + 2 * i, &8u32.to_be_bytes()))
        .collect();
    tcp.write_all(&resets).await.unwrap();
    assert!(closed_within(&mut tcp, Duration::from_secs(5)).await);
    until_metric(&c, &gw, &closed("canceled_streams"), |n| n == 1.0).await;

    // Rapid reset: 1,000 requests each reset at once, in one write (h2's
    // own rule: too many streams reset before they were taken up).
    let mut tcp = h2c(gw.port).await;
    let burst: Vec<u8> = (0..1000u32)
        .flat_map(|i| {
            let id = 1 + 2 * i;
            [
                frame(HEADERS, END_STREAM | END_HEADERS, id, &get("/")),
                frame(RST_STREAM, 0, id, &8u32.to_be_bytes()),
            ]
            .concat()
        })
        .collect();
    let _ = tcp.write_all(&burst).await;
    assert!(closed_within(&mut tcp, Duration::from_secs(5)).await);

    // CONTINUATION flood: a header block that never ends.
    let mut tcp = h2c(gw.port).await;
    let _ = tcp
        .write_all(&frame(HEADERS, END_STREAM, 1, &get("/")))
        .await;
    let mut literal = vec![0x00, 0x05];
    literal.extend_from_slice(b"x-pad");
    literal.extend_from_slice(&[0x7f, 0x80, 0x01]); // a 255-byte value
    literal.extend_from_slice(&[b'a'; 255]);
    let mut sent_everything = true;
    for _ in 0..2000 {
        if tcp
            .write_all(&frame(CONTINUATION, 0, 1, &literal))
            .await
            .is_err()
        {
            sent_everything = false;
            break;
        }
    }
    assert!(
        !sent_everything || closed_within(&mut tcp, Duration::from_secs(5)).await,
        "a header block of 500 KB was kept open"
    );

    // Meanwhile a well-behaved client is served.
    let reply = send(
        &c,
        "GET",
        &format!("http://127.0.0.1:{}/hello", gw.port),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
}
