//! Many nodes as one gateway (docs/cluster.md), on real servers: an etcd and
//! a redis-server started by the test, three `wasmgate run` processes whose
//! configuration is in etcd. A change through any node's admin API reaches
//! every node; conflicting edits get 409; etcd can go away under traffic
//! without a failed request; a broken change is rejected everywhere with
//! its reason in `/cluster`; a late node catches up; a rate limit kept
//! in Redis holds for the cluster, not per node, right after a Redis
//! restart too; and a TLS certificate
//! written through one node is served by all.
//!
//! One module a concern: how changes spread (and are refused), how nodes
//! come, go and lose etcd, and the state they share (Redis, certificates).

mod changes;
mod membership;
mod shared_state;

use crate::common::gateway::{send, GatewayProc};
use crate::common::HttpClient;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use wasmgate_testkit::EtcdServer;

/// A node whose configuration is in `etcd`.
fn node(etcd: &EtcdServer, name: &str, extra: &str) -> GatewayProc {
    node_granting(etcd, name, extra, "{}")
}

/// The same, its file granting the cluster's plugins `grants`
/// (docs/security.md: etcd's plugins get only what the node's file grants).
fn node_granting(etcd: &EtcdServer, name: &str, extra: &str, grants: &str) -> GatewayProc {
    GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
grants: {grants}
config: {{etcd: ["{}"], node_name: {name}{extra}}}
"#,
        etcd.url()
    ))
}

/// Publishes `yaml` (a whole configuration) with `wasmgate config push`.
fn push(etcd: &EtcdServer, yaml: &str) {
    let (ok, text) = try_push(etcd, yaml, &[]);
    assert!(ok, "{text}");
}

/// `wasmgate config push` with `args`: whether it succeeded, and its output.
fn try_push(etcd: &EtcdServer, yaml: &str, args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, crate::common::gateway::render(yaml, 0, 0)).unwrap();
    let out = crate::common::wasmgate()
        .args(["config", "push", "-c"])
        .arg(&file)
        .args(["--etcd", &etcd.url()])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Waits until `gw`'s watch has brought etcd revision `revision` (so it
/// has seen every change up to it, its own writes' echoes included).
async fn until_watched(c: &HttpClient, gw: &GatewayProc, revision: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = send(c, "GET", &gw.admin_url("/status"), &[], "")
            .await
            .json();
        if status["config"]["revision_watched"].as_i64() >= Some(revision) {
            return;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This node's own entry in its `/cluster` view.
async fn me(c: &HttpClient, gw: &GatewayProc) -> Value {
    let view = cluster(c, gw).await;
    view["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == view["this_node"]))
        .cloned()
        .unwrap_or_default()
}

/// Waits until `check` holds for `gw`'s `/cluster` view.
async fn until_cluster(c: &HttpClient, gw: &GatewayProc, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = cluster(c, gw).await;
        if check(&view) {
            return view;
        }
        assert!(Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn body(c: &HttpClient, gw: &GatewayProc, path: &str) -> (u16, String) {
    let r = send(c, "GET", &gw.url(path), &[], "").await;
    (r.status, r.text())
}

/// Waits until `path` on `gw` answers `expected` (a change propagating).
async fn until_serves(c: &HttpClient, gw: &GatewayProc, path: &str, expected: &str) -> Duration {
    let started = Instant::now();
    loop {
        let (_, text) = body(c, gw, path).await;
        if text == expected {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{path} never answered {expected:?} (last: {text:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `path` on `gw` matches no route (404, kind `no_route`).
async fn until_no_route(c: &HttpClient, gw: &GatewayProc, path: &str) {
    let started = Instant::now();
    loop {
        let r = send(c, "GET", &gw.url(path), &[], "").await;
        if r.status == 404 && r.text().contains(r#""kind":"no_route""#) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{path} is still routed: {} {}",
            r.status,
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn cluster(c: &HttpClient, gw: &GatewayProc) -> Value {
    send(c, "GET", &gw.admin_url("/cluster"), &[], "")
        .await
        .json()
}

const BASE: &str = r#"
plugins:
  - {name: tag, wasm: "{wasm:add_header}"}
routes:
  - {name: home, path: {prefix: /home}, plugins: [{plugin: tag, conf: v1}], respond: {status: 200, body: home-v1}}
"#;

/// Waits until `file` exists and holds `text` (the cache file is written
/// just after a configuration is swapped in).
async fn until_file_holds(file: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(file).is_ok_and(|t| t.contains(text)) {
        assert!(
            Instant::now() < deadline,
            "{} never held {text}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
