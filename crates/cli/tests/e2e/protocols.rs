//! WebSocket, gRPC and HTTP/2 upstreams through `wasmgate run`
//! (docs/protocols.md), with real peers: Python's `websockets` and
//! `grpcio` as upstream servers and as clients (tests/protocols), Proxy-Wasm
//! filters built from the Rust SDK on the routes, and raw TCP peers of the
//! test's own for the misbehaving cases (a node that answers 101 and
//! closes, a half-closed tunnel, a silent client).

use std::io::BufRead;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::gateway::{metric, send, until_generation, GatewayProc};
use crate::common::peers::{client, client_running, Peer};
use crate::common::{client as http_client, HttpClient};
use wasmgate_testkit::pki::{KeyType, Pki};

fn ws(gw: &GatewayProc, path: &str) -> String {
    format!("ws://127.0.0.1:{}{path}", gw.port)
}

async fn websocket(url: String, scenario: &str, rest: &[&str]) -> serde_json::Value {
    let mut args = vec![url, scenario.to_string()];
    args.extend(rest.iter().map(|s| s.to_string()));
    let run = client("websocket_peer.py", args.clone()).await;
    assert!(run.ok, "websocket {args:?}: {}", run.report);
    run.report
}

/// Waits until `series` in /metrics reads `want`.
async fn until_metric(c: &HttpClient, gw: &GatewayProc, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = metric(c, gw, series).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{series} is {now}, not {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn websocket_config(upstream: &str, extra_routes: &str) -> String {
    format!(
        r#"listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: tag, wasm: "{{wasm:add_header}}"}}
  - {{name: refuse, wasm: "{{wasm:fault_injection}}"}}
upstreams:
  - {{name: chat, nodes: [{{address: "{upstream}"}}]}}
routes:
  - {{name: filtered, path: {{prefix: /f/}}, plugins: [{{plugin: tag, conf: ws-filter}}], upstream: chat}}
  - {{name: refused, path: {{prefix: /no/}}, plugins: [{{plugin: refuse, conf: '{{"http_status":403,"body":"no websockets here"}}'}}], upstream: chat}}
  - {{name: off, path: {{prefix: /off/}}, upgrade: {{protocols: []}}, upstream: chat}}
  - {{name: idle, path: {{prefix: /idle/}}, upgrade: {{idle_timeout_ms: 300}}, upstream: chat}}
  - {{name: short, path: {{prefix: /short/}}, upgrade: {{max_duration_ms: 500}}, upstream: chat}}
{extra_routes}  - {{name: plain, path: {{prefix: /}}, upstream: chat}}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn websockets_pass_through_routes_with_and_without_filters() {
    let upstream = Peer::serve("websocket_peer.py", &[]);
    let gw = GatewayProc::start(&websocket_config(&upstream.address(), ""));
    let c = http_client();

    // Text, binary, 1 MiB, ping/pong, 100 in a row, a normal close: with
    // and without a filter on the route.
    for path in ["/echo", "/f/echo"] {
        let report = websocket(ws(&gw, path), "echo", &[]).await;
        assert_eq!(report["close_code"], 1000, "{path}: {report}");
    }
    // The filter saw the upgrade request: its header reached the node, and
    // so did the forwarding fields and the client's own.
    let report = websocket(ws(&gw, "/f/headers"), "headers", &["x-client=hello"]).await;
    let headers = &report["headers"];
    assert_eq!(headers["x-wasmgate-filter"], "ws-filter", "{report}");
    assert_eq!(headers["x-client"], "hello");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(
        headers["upgrade"]
            .as_str()
            .map(str::to_lowercase)
            .as_deref(),
        Some("websocket")
    );
    // The node's close code and reason reach the client.
    let report = websocket(ws(&gw, "/close/4001"), "close", &[]).await;
    assert_eq!(
        (
            report["close_code"].as_u64(),
            report["close_reason"].as_str()
        ),
        (Some(4001), Some("bye"))
    );
    // A filter refuses the upgrade with a local response: the client gets
    // it instead of a 101, and the node never hears of it.
    let report = websocket(ws(&gw, "/no/echo"), "refused", &[]).await;
    assert_eq!(report["status"], 403, "{report}");
    assert_eq!(report["body"], "no websockets here");
    // Upgrades turned off on a route: the request goes as a plain GET
    // (its `Upgrade` dropped), and the node refuses that.
    let report = websocket(ws(&gw, "/off/echo"), "refused", &[]).await;
    assert_ne!(report["status"], 101, "{report}");

    // Counted per route, and every tunnel closed again.
    until_metric(&c, &gw, r#"wasmgate_tunnels_open{route="plain"}"#, 0.0).await;
    until_metric(&c, &gw, r#"wasmgate_tunnels_open{route="filtered"}"#, 0.0).await;
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_tunnels_total{route="plain"}"#).await,
        2.0
    );
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_tunnels_total{route="filtered"}"#).await,
        2.0
    );
    let up = metric(
        &c,
        &gw,
        r#"wasmgate_tunnel_bytes_total{route="filtered",direction="to_upstream"}"#,
    )
    .await;
    let down = metric(
        &c,
        &gw,
        r#"wasmgate_tunnel_bytes_total{route="filtered",direction="to_client"}"#,
    )
    .await;
    assert!(up > 1_048_576.0 && down > 1_048_576.0, "{up} {down}");
    let closed = metric(
        &c,
        &gw,
        r#"wasmgate_tunnels_closed_total{route="plain",reason="closed"}"#,
    )
    .await;
    assert_eq!(closed, 2.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_websocket_survives_reloads_and_tunnels_end_on_their_limits() {
    let upstream = Peer::serve("websocket_peer.py", &[]);
    let config = websocket_config(&upstream.address(), "");
    let gw = GatewayProc::start(&config);
    let c = http_client();

    // A tunnel open across two reloads (one changing the very route it came
    // through) keeps working; it ends when its client closes it.
    let args = [ws(&gw, "/f/echo"), "hold".into(), "1.5".into()];
    let (mut held, mut lines) = client_running("websocket_peer.py", &args);
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "open");
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_tunnels_open{route="filtered"}"#).await,
        1.0
    );
    gw.rewrite(&config.replace("conf: ws-filter", "conf: changed"));
    until_generation(&c, &gw, 2).await;
    gw.rewrite(&websocket_config(
        &upstream.address(),
        "  - {name: added, path: {exact: /added}, respond: {status: 200}}\n",
    ));
    until_generation(&c, &gw, 3).await;
    let done = tokio::task::spawn_blocking(move || held.wait().unwrap())
        .await
        .unwrap();
    line.clear();
    lines.read_line(&mut line).unwrap();
    assert!(
        done.success(),
        "the tunnel broke across the reloads: {line}"
    );
    until_metric(&c, &gw, r#"wasmgate_tunnels_open{route="filtered"}"#, 0.0).await;

    // A silent tunnel ends at its idle timeout; a busy one at its maximum
    // duration; each counted under its reason.
    let report = websocket(ws(&gw, "/idle/echo"), "idle", &["0.3"]).await;
    let after = report["closed_after_s"].as_f64().unwrap();
    assert!((0.25..3.0).contains(&after), "{report}");
    let report = websocket(ws(&gw, "/short/echo"), "idle", &["0.5"]).await;
    let after = report["closed_after_s"].as_f64().unwrap();
    assert!((0.45..3.0).contains(&after), "{report}");
    until_metric(
        &c,
        &gw,
        r#"wasmgate_tunnels_closed_total{route="idle",reason="idle_timeout"}"#,
        1.0,
    )
    .await;
    until_metric(
        &c,
        &gw,
        r#"wasmgate_tunnels_closed_total{route="short",reason="max_duration"}"#,
        1.0,
    )
    .await;
}

/// A raw upstream: answers every upgrade request with a 101, then for
/// `/close` closes at once, and otherwise echoes until the client's end of
/// stream, then says `bye` and closes (a half-closed tunnel).
async fn raw_upstream() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let head = read_head(&mut stream).await;
                let reply = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: raw\r\n\r\n";
                stream.write_all(reply.as_bytes()).await.unwrap();
                if head.starts_with("GET /close") {
                    return;
                }
                let mut buffer = [0u8; 1024];
                loop {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if stream.write_all(&buffer[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = stream.write_all(b"bye").await;
            });
        }
    });
    (port, task)
}

async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Opens a `raw` upgrade through the gateway; the 101's head.
async fn open_raw(gw: &GatewayProc, path: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: raw.test\r\nconnection: upgrade\r\nupgrade: raw\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    (stream, head)
}

async fn read_to_end(stream: &mut TcpStream) -> String {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the gateway closed the tunnel")
        .unwrap();
    String::from_utf8_lossy(&rest).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_tunnels_end_cleanly_and_leak_nothing() {
    let (port, _upstream) = raw_upstream().await;
    let gw = GatewayProc::start(&format!(
        r#"listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - {{name: raw, nodes: [{{address: "127.0.0.1:{port}"}}]}}
routes:
  - {{name: raw, path: {{prefix: /}}, upgrade: {{protocols: [raw], idle_timeout_ms: 400}}, upstream: raw}}
"#
    ));
    let c = http_client();
    // The node answers 101 and closes: the client's tunnel ends too.
    let (mut stream, head) = open_raw(&gw, "/close").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(read_to_end(&mut stream).await, "");
    // Half-closed: the client ends its side; the node still answers, and
    // the tunnel ends when both sides have.
    let (mut stream, head) = open_raw(&gw, "/half").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    stream.write_all(b"abc").await.unwrap();
    stream.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut stream).await, "abcbye");
    // A client that opens a tunnel and goes silent is cut at the idle timeout.
    let started = Instant::now();
    let (mut stream, _) = open_raw(&gw, "/silent").await;
    assert_eq!(read_to_end(&mut stream).await, "");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Many at once, dropped by their clients mid-tunnel.
    let mut open = Vec::new();
    for _ in 0..20 {
        open.push(open_raw(&gw, "/drop").await.0);
    }
    drop(open);

    // Nothing left: no tunnel, no upstream connection; the gateway serves on.
    until_metric(&c, &gw, r#"wasmgate_tunnels_open{route="raw"}"#, 0.0).await;
    let node =
        format!(r#"wasmgate_upstream_node_connections{{upstream="raw",node="127.0.0.1:{port}"}}"#);
    until_metric(&c, &gw, &node, 0.0).await;
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_tunnels_total{route="raw"}"#).await,
        23.0
    );
    let idle = metric(
        &c,
        &gw,
        r#"wasmgate_tunnels_closed_total{route="raw",reason="idle_timeout"}"#,
    )
    .await;
    assert!(idle >= 1.0);
    let (_, head) = open_raw(&gw, "/again").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}

fn grpc_config(node: &str, protocol: &str, tls: &str) -> String {
    format!(
        r#"listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: tag, wasm: "{{wasm:add_header}}"}}
  - {{name: refuse, wasm: "{{wasm:fault_injection}}"}}
upstreams:
  - {{name: echo, protocol: {protocol}, nodes: [{{address: "{node}"}}]{tls}}}
  - {{name: down, protocol: h2c, nodes: [{{address: "127.0.0.1:9"}}], retries: 0}}
  - {{name: slow, protocol: {protocol}, read_timeout_ms: 300, nodes: [{{address: "{node}"}}]{tls}}}
routes:
  - {{name: filtered, hosts: [filtered.test], path: {{prefix: /test.Echo/}}, plugins: [{{plugin: tag, conf: grpc-filter}}], upstream: echo}}
  - {{name: refused, hosts: [refused.test], path: {{prefix: /}}, plugins: [{{plugin: refuse, conf: '{{"http_status":403,"body":"no"}}'}}], upstream: echo}}
  - {{name: down, hosts: [down.test], path: {{prefix: /}}, upstream: down}}
  - {{name: down-filtered, hosts: [down-filtered.test], path: {{prefix: /}}, plugins: [{{plugin: tag, conf: grpc-filter}}], upstream: down}}
  - {{name: slow, hosts: [slow.test], path: {{prefix: /}}, upstream: slow}}
  - {{name: plain, hosts: [plain.test, 127.0.0.1], path: {{prefix: /test.Echo/}}, upstream: echo}}
"#
    )
}

/// A gRPC client through the gateway, with `host` as the call's authority.
async fn grpc_via(
    gw: &GatewayProc,
    host: &str,
    scenario: &str,
    rest: &[&str],
) -> crate::common::peers::ClientRun {
    let mut args = vec![
        format!("127.0.0.1:{}", gw.port),
        scenario.to_string(),
        format!("authority={host}"),
    ];
    args.extend(rest.iter().map(|s| s.to_string()));
    client("grpc_peer.py", args).await
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_calls_of_every_kind_pass_over_h2c_and_h2_upstreams() {
    let pki = Pki::new("grpc");
    let server = pki.server(&["localhost"], KeyType::EcdsaP256, 1, 30);
    let (cert, key) = (
        server.cert.display().to_string(),
        server.key.display().to_string(),
    );
    let h2c = Peer::serve("grpc_peer.py", &[]);
    let h2 = Peer::serve("grpc_peer.py", &[&cert, &key]);
    let tls = format!(
        ", tls: {{sni: localhost, ca_file: \"{}\"}}",
        pki.ca.display()
    );
    for (gw, what) in [
        (
            GatewayProc::start(&grpc_config(&h2c.address(), "h2c", "")),
            "h2c",
        ),
        (
            GatewayProc::start(&grpc_config(&h2.address(), "h2", &tls)),
            "h2",
        ),
        (
            GatewayProc::start(&grpc_config(&h2.address(), "auto", &tls)),
            "auto",
        ),
    ] {
        // Unary, both streaming kinds, ping-pong bidi and a stream where the
        // server speaks first, statuses with their messages and trailing
        // metadata, end to end; on a route with a filter too (whose header
        // reaches the server as metadata): the filtered route opens the
        // upstream request at the headers, not at the first message.
        for host in ["plain.test", "filtered.test"] {
            let run = grpc_via(&gw, host, "all", &[]).await;
            assert!(run.ok, "{what} {host}: {}", run.report);
            let filtered = run.report["metadata_seen"]["x-wasmgate-filter"].as_str();
            assert_eq!(
                filtered,
                (host == "filtered.test").then_some("grpc-filter"),
                "{}",
                run.report
            );
        }
        // The calls shared one multiplexed connection to the node.
        let c = http_client();
        let node = match what {
            "h2c" => h2c.address(),
            _ => h2.address(),
        };
        let series =
            format!(r#"wasmgate_upstream_node_connections{{upstream="echo",node="{node}"}}"#);
        assert_eq!(metric(&c, &gw, &series).await, 1.0, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_own_answers_reach_grpc_clients_as_grpc_statuses() {
    let upstream = Peer::serve("grpc_peer.py", &[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let gw = GatewayProc::start(&format!(
        "access_log: {{path: {}}}\n{}",
        log.display(),
        grpc_config(&upstream.address(), "h2c", "")
    ));
    // What failed inside is the operator's (docs/security.md): clients get
    // the kind and the request id; behind a filter too.
    let cases = [
        ("nowhere.test", "NOT_FOUND", "no_route (request "),
        ("down.test", "UNAVAILABLE", "upstream_unreachable (request "),
        (
            "down-filtered.test",
            "UNAVAILABLE",
            "upstream_unreachable (request ",
        ),
        ("refused.test", "PERMISSION_DENIED", "refused by a filter"),
    ];
    for (host, code, message) in cases {
        let run = grpc_via(&gw, host, "status", &[]).await;
        assert_eq!(run.report["code"], code, "{host}: {}", run.report);
        let got = run.report["message"].as_str().unwrap_or_default();
        assert!(got.contains(message), "{host}: {}", run.report);
    }
    // The upstream's read timeout, and the call's own deadline: both
    // DEADLINE_EXCEEDED, the latter from the gateway before the client's
    // own timer (the client allows a second more than `grpc-timeout`).
    let run = grpc_via(&gw, "slow.test", "deadline", &["2000"]).await;
    assert_eq!(run.report["code"], "DEADLINE_EXCEEDED", "{}", run.report);
    assert!(
        run.report["seconds"].as_f64().unwrap() < 1.5,
        "{}",
        run.report
    );
    // The call's own deadline, kept by the gateway (a raw HTTP/2 client
    // that keeps none itself, whose authority is the address, which the
    // plain route also serves): trailers-only DEADLINE_EXCEEDED at the time
    // `grpc-timeout` gives, while the node is still sleeping.
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let message = b"sleep:5000";
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    let request = hyper::Request::post(gw.url("/test.Echo/Unary"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(http_body_util::Full::new(bytes::Bytes::from(frame)))
        .unwrap();
    let started = Instant::now();
    let response = h2.request(request).await.unwrap();
    let took = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["grpc-status"], "4", "{response:?}");
    let said = response.headers()["grpc-message"].to_str().unwrap();
    assert!(said.contains("grpc-timeout"), "{said}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // Ordinary requests are not gRPC: the same failure is JSON for them.
    let c = http_client();
    let reply = send(&c, "GET", &gw.url("/x"), &[("host", "down.test")], "").await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["error"]["kind"], "upstream_unreachable");

    // The access log says what the gRPC clients got (HTTP 200 with a
    // grpc-status) and why, with or without a filter; the JSON answer's
    // line says 502.
    let lines = crate::common::log_lines(&log, 3, |l| {
        l["route"] == "down" || l["route"] == "down-filtered"
    });
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        assert_eq!(line["error"], "upstream_unreachable", "{line}");
        let expected = if line["protocol"] == "HTTP/2" {
            200
        } else {
            502
        };
        assert_eq!(line["status"], expected, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_grpc_stream_survives_reloads() {
    let upstream = Peer::serve("grpc_peer.py", &[]);
    let config = grpc_config(&upstream.address(), "h2c", "");
    let gw = GatewayProc::start(&config);
    let c = http_client();
    // A bidi stream through the filtered route, open across a reload that
    // changes that route's filter and one that adds a route.
    let args = [
        format!("127.0.0.1:{}", gw.port),
        "hold".into(),
        "1.5".into(),
        "authority=filtered.test".into(),
    ];
    let (mut held, mut lines) = client_running("grpc_peer.py", &args);
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "open");
    gw.rewrite(&config.replace("conf: grpc-filter", "conf: changed"));
    until_generation(&c, &gw, 2).await;
    let added = "  - {name: added, path: {exact: /added}, respond: {status: 200}}\n";
    gw.rewrite(&format!(
        "{}{added}",
        config.replace("conf: grpc-filter", "conf: changed")
    ));
    until_generation(&c, &gw, 3).await;
    let done = tokio::task::spawn_blocking(move || held.wait().unwrap())
        .await
        .unwrap();
    line.clear();
    lines.read_line(&mut line).unwrap();
    assert!(
        done.success(),
        "the stream broke across the reloads: {line}"
    );
    // New calls take the new filter configuration.
    let run = grpc_via(&gw, "filtered.test", "all", &[]).await;
    assert!(run.ok, "{}", run.report);
    assert_eq!(run.report["metadata_seen"]["x-wasmgate-filter"], "changed");
}

/// An HTTP/2 node (h2c, hyper's server) that misbehaves on purpose: after
/// `per_connection` requests on a connection it sends GOAWAY (a graceful
/// close: the streams it took are answered, later ones refused); a request
/// for `/reset` has its stream reset; `/slow` is answered after 50 ms.
/// Counts the connections it accepted.
async fn unruly_h2_node(per_connection: usize) -> (String, Arc<AtomicUsize>) {
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let served = Arc::new(AtomicUsize::new(0));
                let enough = Arc::new(tokio::sync::Notify::new());
                let (counted, told) = (served.clone(), enough.clone());
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let (counted, told) = (counted.clone(), told.clone());
                    async move {
                        if counted.fetch_add(1, Ordering::SeqCst) + 1 == per_connection {
                            told.notify_one();
                        }
                        match request.uri().path() {
                            "/reset" => Err("reset on purpose"),
                            path => {
                                if path == "/slow" {
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                                let body = http_body_util::Full::new(bytes::Bytes::from("ok"));
                                Ok(hyper::Response::new(body))
                            }
                        }
                    }
                });
                let connection =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => return,
                    _ = enough.notified() => connection.as_mut().graceful_shutdown(),
                }
                let _ = connection.await;
            });
        }
    });
    (address, connections)
}

#[tokio::test(flavor = "multi_thread")]
async fn h2_nodes_that_go_away_reset_streams_or_get_floods_leave_the_gateway_serving() {
    let (going_away, connections) = unruly_h2_node(10).await;
    let (steady, _) = unruly_h2_node(usize::MAX).await;
    let gw = GatewayProc::start(&format!(
        r#"listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - {{name: going, protocol: h2c, nodes: [{{address: "{going_away}"}}]}}
  - {{name: steady, protocol: h2c, nodes: [{{address: "{steady}"}}]}}
routes:
  - {{name: going, path: {{prefix: /going/}}, upstream: going}}
  - {{name: steady, path: {{prefix: /}}, upstream: steady}}
"#
    ));
    let c = http_client();
    // GOAWAY after every 10 requests: the gateway moves to a new connection
    // and no request is lost (one the node refused unprocessed is sent
    // again, as RFC 9113 8.7 allows).
    for i in 0..45 {
        let reply = crate::common::gateway::get(&c, &gw.url("/going/x")).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
    }
    let made = connections.load(Ordering::SeqCst);
    assert!(
        (5..=8).contains(&made),
        "{made} connections for 45 requests"
    );

    // A reset stream is that request's failure (a 502 naming it), not the
    // connection's: the next request on it is answered.
    let reply = crate::common::gateway::get(&c, &gw.url("/reset")).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(
        crate::common::gateway::get(&c, &gw.url("/x")).await.status,
        200
    );

    // A flood: 400 concurrent streams from one client connection, all
    // answered, over the node's one multiplexed connection.
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..400 {
        let (h2, url) = (h2.clone(), gw.url("/slow"));
        calls.spawn(async move { h2.get(url.parse().unwrap()).await.map(|r| r.status()) });
    }
    while let Some(done) = calls.join_next().await {
        assert_eq!(done.unwrap().unwrap(), 200);
    }
    let series =
        format!(r#"wasmgate_upstream_node_connections{{upstream="steady",node="{steady}"}}"#);
    assert_eq!(metric(&c, &gw, &series).await, 1.0);
    assert_eq!(
        crate::common::gateway::get(&c, &gw.url("/x")).await.status,
        200
    );
}
