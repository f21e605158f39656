//! The access log (docs/observability.md): one line per request with its
//! fixed fields, through filters, a filter's local answer, the gateway's own
//! errors and `serve`; reopened on SIGUSR1; lines that cannot be written
//! counted in /metrics while requests go on.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::gateway::{metric, send, until_metric, with_upstream, GatewayProc};
use crate::common::{client, plugin, wasmgate, Server};

/// The log's lines once it has at least `n` of them.
fn lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    crate::common::log_lines(path, n, |_| true)
}

fn gateway_config(log: &str, extra: &str) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
access_log: {log}
plugins:
  - {{name: tag, wasm: "{{wasm:add_header}}"}}
  - {{name: go_tag, wasm: "{{wasm:go_add_header}}"}}
  - {{name: fault, wasm: "{{wasm:fault_injection}}"}}
upstreams:
  - {{name: backend, nodes: [{{address: "{{backend}}"}}]}}
routes:
  - {{name: fault, path: {{prefix: /fault}}, plugins: [{{plugin: fault, conf: {{body: "from the filter", http_status: 403}}}}], upstream: backend}}
  - {{name: quiet, path: {{prefix: /quiet}}, upstream: backend, access_log: false}}
  - {{name: api, path: {{prefix: /api}}, plugins: [{{plugin: tag, conf: one}}, {{plugin: go_tag, conf: two}}], upstream: backend}}
  - {{name: plain, path: {{prefix: /plain}}, upstream: backend}}
{extra}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_leaves_one_line_with_its_fields() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.log");
    let (backend, gw) = with_upstream(
        "backend",
        &gateway_config(&format!("{{path: \"{}\"}}", file.display()), ""),
    )
    .await;
    let c = client();
    let r = send(&c, "POST", &gw.url("/api/x?q=1"), &[], "twelve bytes").await;
    assert_eq!(r.status, 200);
    let answer_bytes = r.body.len() as u64;
    let r = send(&c, "GET", &gw.url("/fault"), &[], "").await;
    assert_eq!(r.status, 403);
    assert_eq!(
        send(&c, "GET", &gw.url("/quiet"), &[], "").await.status,
        200
    );
    let r = send(&c, "GET", &gw.url("/plain"), &[], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        send(&c, "GET", &gw.url("/nowhere"), &[], "").await.status,
        404
    );

    let log = lines(&file, 4);
    assert_eq!(log.len(), 4, "the quiet route writes none: {log:?}");
    // A line is written when its answer's last byte has gone, which can be
    // after the client has read it and sent the next request: lines are
    // found by route, not by position.
    let by_route = |route: &str| {
        let found: Vec<&serde_json::Value> = log.iter().filter(|l| l["route"] == route).collect();
        assert_eq!(found.len(), 1, "one line for route {route:?}: {log:?}");
        found[0]
    };
    let api = by_route("api");
    assert_eq!(api["route"], "api");
    assert_eq!(api["method"], "POST");
    assert_eq!(api["path"], "/api/x?q=1");
    assert_eq!(api["protocol"], "HTTP/1.1");
    assert_eq!(api["status"], 200);
    assert_eq!(api["bytes_in"], 12);
    assert_eq!(api["bytes_out"], answer_bytes);
    assert_eq!(api["upstream"], backend.address());
    assert!(api["upstream_ms"].as_f64().unwrap() > 0.0, "{api}");
    assert!(api["duration_ms"].as_f64().unwrap() >= api["upstream_ms"].as_f64().unwrap());
    assert!(api["request_id"].as_u64().unwrap() > 0);
    assert!(api["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(api["time"].as_str().unwrap().ends_with('Z'), "{api}");
    let filters: Vec<&str> = api["filters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(filters, ["tag", "go_tag"]);
    assert!(api["filters"][0]["ms"].as_f64().unwrap() > 0.0, "{api}");
    assert!(api["local_response"].is_null() && api["error"].is_null());

    let fault = by_route("fault");
    assert_eq!(fault["status"], 403);
    assert_eq!(fault["local_response"], "fault");
    assert!(fault["upstream"].is_null(), "{fault}");
    assert_eq!(fault["bytes_out"], "from the filter".len());

    let plain = by_route("plain");
    assert_eq!(
        (
            plain["route"].as_str(),
            plain["filters"].as_array().unwrap().len()
        ),
        (Some("plain"), 0)
    );
    assert_eq!(plain["upstream"], backend.address());

    let none = by_route("");
    assert_eq!(
        (none["status"].as_u64(), none["error"].as_str()),
        (Some(404), Some("no_route"))
    );

    assert_eq!(
        metric(&c, &gw, "wasmgate_access_log_lines_total").await,
        4.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_file_after_logrotate_moved_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.log");
    let (_backend, gw) = with_upstream(
        "backend",
        &gateway_config(&format!("{{path: \"{}\"}}", file.display()), ""),
    )
    .await;
    let c = client();
    send(&c, "GET", &gw.url("/plain"), &[], "").await;
    lines(&file, 1);
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&file, &rotated).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-USR1", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    until_metric(&c, &gw, "wasmgate_access_log_reopens_total", |n| n >= 1.0).await;
    send(&c, "GET", &gw.url("/api/after"), &[], "").await;
    let new = lines(&file, 1);
    assert_eq!(new[0]["path"], "/api/after");
    assert_eq!(
        lines(&rotated, 1).len(),
        1,
        "the old file kept its line only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_cannot_be_written_are_counted_and_requests_go_on() {
    // /dev/full takes the open and fails every write (ENOSPC).
    let (_backend, gw) = with_upstream("backend", &gateway_config("{path: /dev/full}", "")).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(
            send(&c, "GET", &gw.url("/plain"), &[], "").await.status,
            200
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lost = metric(
            &c,
            &gw,
            "wasmgate_access_log_lost_total{reason=\"write_error\"}",
        )
        .await;
        if lost > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no write error counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_format_names_its_fields_and_a_bad_path_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.txt");
    let (_backend, gw) = with_upstream(
        "backend",
        &gateway_config(
            &format!("{{path: \"{}\", format: text}}", file.display()),
            "",
        ),
    )
    .await;
    let c = client();
    send(&c, "GET", &gw.url("/fault"), &[], "").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            break line.to_string();
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(line.starts_with("127.0.0.1:"), "{line}");
    assert!(
        line.contains("\"GET 127.0.0.1/fault HTTP/1.1\" 403 15 in=0 ms="),
        "{line}"
    );
    assert!(
        line.contains(" route=fault upstream=- upstream_ms=- filters=fault:"),
        "{line}"
    );
    assert!(line.contains(" local=fault error=- id="), "{line}");
    drop(gw);

    let bad = dir.path().join("gw.yaml");
    std::fs::write(
        &bad,
        "listen: 127.0.0.1:0\naccess_log: {path: /no/such/dir/access.log}\nroutes: [{name: r, respond: {}}]\n",
    )
    .unwrap();
    let out = wasmgate().args(["run", "-c"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("access_log: cannot open"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.log");
    let server = Server::start(&[
        plugin("hello").to_str().unwrap(),
        "hello",
        "--access-log",
        file.to_str().unwrap(),
    ]);
    let c = client();
    let r = crate::common::post(&c, &server.url("/"), "Ada").await;
    assert_eq!(r.status, 200);
    let r = crate::common::post(&c, &server.url("/nope"), "x").await;
    assert_eq!(r.status, 404);
    let log = lines(&file, 2);
    // Lines are written once an answer's last byte has gone, so the second
    // request's line may come first.
    let (ok, missing) = match log[0]["status"].as_u64() {
        Some(200) => (&log[0], &log[1]),
        _ => (&log[1], &log[0]),
    };
    assert_eq!(
        (ok["route"].as_str(), ok["status"].as_u64()),
        (Some("hello"), Some(200))
    );
    assert_eq!(ok["bytes_in"], 3);
    assert_eq!(ok["bytes_out"], r#"{"message":"Hello Ada"}"#.len());
    assert_eq!(missing["error"], "function_not_found");
    // A graceful stop writes the last request's line before the process
    // exits (the writer takes the queue every 20 ms; the exit waits for it).
    let mut server = server;
    crate::common::post(&c, &server.url("/"), "last").await;
    server.terminate();
    assert!(server.child.wait().unwrap().success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.lines().last().unwrap().contains("\"bytes_in\":4"),
        "{text}"
    );
    // Off is off.
    let quiet = GatewayProc::start("listen: \"{listen}\"\naccess_log: {enabled: false}\nroutes: [{name: r, respond: {body: hi}}]\n");
    assert_eq!(send(&c, "GET", &quiet.url("/"), &[], "").await.text(), "hi");
}
