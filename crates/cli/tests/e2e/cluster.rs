//! Many nodes as one gateway (docs/cluster.md), on real servers: an etcd and
//! a redis-server started by the test, three `wasmgate run` processes whose
//! configuration is in etcd. A change through any node's admin API reaches
//! every node; conflicting edits get 409; etcd can go away under traffic
//! without a failed request; a broken change is rejected everywhere with
//! its reason in `/cluster`; a late node catches up; a rate limit kept
//! in Redis holds for the cluster, not per node, right after a Redis
//! restart too; and a TLS certificate
//! written through one node is served by all.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::gateway::{send, GatewayProc};
use crate::common::tls::{certificate, curl};
use crate::common::{client, HttpClient};
use serde_json::Value;
use wasmgate_testkit::pki::{KeyType, Pki};
use wasmgate_testkit::{EtcdServer, RedisServer};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_any_node_reaches_every_node() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| node(&etcd, &format!("node{i}"), ""))
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v1").await;
    }
    let generation = |gw: &GatewayProc| {
        let (c, url) = (c.clone(), gw.admin_url("/status"));
        async move { send(&c, "GET", &url, &[], "").await.json()["reload"]["generation"].as_u64() }
    };
    let writer_generation = generation(&nodes[0]).await.unwrap();
    // Added through node 1's admin API: served by nodes 2 and 3.
    let put = send(
        &c,
        "PUT",
        &nodes[0].admin_url("/routes/api"),
        &[("content-type", "application/json")],
        r#"{"path": {"prefix": "/api"}, "respond": {"status": 200, "body": "api"}}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    let revision = put.json()["revision"].as_i64().unwrap();
    for gw in &nodes[1..] {
        until_serves(&c, gw, "/api", "api").await;
    }
    // Every node is listed, serving that revision; the metric says so too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = cluster(&c, &nodes[2]).await;
        let nodes_seen = view["nodes"].as_array().cloned().unwrap_or_default();
        let current = nodes_seen
            .iter()
            .filter(|n| n["revision"].as_i64() >= Some(revision) && n["healthy"] == true)
            .count();
        if nodes_seen.len() == 3 && current == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = send(&c, "GET", &nodes[1].admin_url("/metrics"), &[], "")
        .await
        .text();
    let served: i64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("wasmgate_config_revision "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(served >= revision, "{served} < {revision}");
    // The writer built the change once: the echo of its own write from the
    // watch is recognised, not rebuilt (its generation went up by one, and
    // stays there once its watch has brought the echo).
    until_watched(&c, &nodes[0], revision).await;
    assert_eq!(generation(&nodes[0]).await, Some(writer_generation + 1));
    // Deleted through node 3: gone everywhere.
    let del = send(&c, "DELETE", &nodes[2].admin_url("/routes/api"), &[], "").await;
    assert_eq!(del.status, 200, "{}", del.text());
    for gw in &nodes {
        until_no_route(&c, gw, "/api").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_conflicting_edits_one_wins_and_the_other_gets_409() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    let (a, b) = (node(&etcd, "a", ""), node(&etcd, "b", ""));
    let c = client();
    until_serves(&c, &a, "/home", "home-v1").await;
    until_serves(&c, &b, "/home", "home-v1").await;
    let edit = |gw: &GatewayProc, text: &str| {
        let (c, url) = (c.clone(), gw.admin_url("/routes/home"));
        let body = format!(r#"{{"path": {{"prefix": "/home"}}, "respond": {{"body": "{text}"}}}}"#);
        async move { send(&c, "PUT", &url, &[], body).await }
    };
    let (ra, rb) = tokio::join!(edit(&a, "from-a"), edit(&b, "from-b"));
    let mut statuses = [ra.status, rb.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{} / {}", ra.text(), rb.text());
    let (winner, loser) = if ra.status == 200 {
        (&ra, &rb)
    } else {
        (&rb, &ra)
    };
    assert_eq!(loser.json()["check"], "conflict", "{}", loser.text());
    let expected = winner.json()["route"]["respond"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    until_serves(&c, &a, "/home", &expected).await;
    until_serves(&c, &b, "/home", &expected).await;
    // The loser, once it has seen the change, can make its own.
    let won_at = winner.json()["revision"].as_i64().unwrap();
    until_watched(&c, &b, won_at).await;
    let retry = edit(&b, "after").await;
    assert_eq!(retry.status, 200, "{}", retry.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_going_away_under_traffic_fails_no_request() {
    let mut etcd = EtcdServer::start();
    push(&etcd, BASE);
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| node(&etcd, &format!("node{i}"), ""))
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v1").await;
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let served = std::sync::Arc::new(AtomicU64::new(0));
    let traffic: Vec<_> = nodes
        .iter()
        .map(|gw| {
            let (c, url, stop, served) = (c.clone(), gw.url("/home"), stop.clone(), served.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let r = send(&c, "GET", &url, &[], "").await;
                    if r.status == 200 {
                        ok += 1;
                        served.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.push(format!("{} {}", r.status, r.text()));
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    // Traffic flows, then etcd goes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while served.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "no traffic");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    etcd.kill();
    // The nodes still serve, and say they lost etcd.
    let deadline = Instant::now() + Duration::from_secs(15);
    for gw in &nodes {
        loop {
            let status = send(&c, "GET", &gw.admin_url("/status"), &[], "")
                .await
                .json();
            if status["config"]["connected"] == false {
                break;
            }
            assert!(Instant::now() < deadline, "{status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    etcd.start_again();
    // A change made after the restart reaches every node.
    push(&etcd, &BASE.replace("home-v1", "home-v2"));
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v2").await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in traffic {
        let (ok, failed) = task.await.unwrap();
        assert!(ok > 100, "only {ok} requests");
        assert!(
            failed.is_empty(),
            "{} failed: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_change_is_rejected_everywhere_with_its_reason() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| node(&etcd, &format!("node{i}"), ""))
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v1").await;
    }
    // Written straight into etcd (as another tool might): a route to an
    // upstream nobody declared.
    etcd.etcdctl(&[
        "put",
        "/wasmgate/routes/broken",
        r#"{"seq": 9, "route": {"path": {"prefix": "/broken"}, "upstream": "nowhere"}}"#,
    ]);
    for gw in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let me = me(&c, gw).await;
            if me["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("nowhere"))
            {
                assert_eq!(me["healthy"], false);
                break;
            }
            assert!(Instant::now() < deadline, "{me}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The previous version keeps serving.
        assert_eq!(body(&c, gw, "/home").await.1, "home-v1");
    }
    // A name outside the one rule (markup in it), written into etcd: the
    // nodes refuse it as check and the admin API do.
    etcd.etcdctl(&["del", "/wasmgate/routes/broken"]);
    etcd.etcdctl(&[
        "put",
        "/wasmgate/routes/\"><script>x",
        r#"{"seq": 9, "route": {"path": {"prefix": "/named"}, "respond": {"body": "x"}}}"#,
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let me = me(&c, &nodes[0]).await;
        if me["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("not a valid name"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{me}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body(&c, &nodes[0], "/named").await.0, 404);
    etcd.etcdctl(&["del", "/wasmgate/routes/\"><script>x"]);
    // A module whose bytes are not what the configuration says: refused too.
    let wrong = "0".repeat(64);
    let plugin = format!(
        r#"{{"wasm": "{}", "sha256": "{wrong}"}}"#,
        crate::common::plugin("add_header").display()
    );
    etcd.etcdctl(&["put", "/wasmgate/plugins/tag", &plugin]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = send(&c, "GET", &nodes[1].admin_url("/status"), &[], "")
            .await
            .json();
        if status["config"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("sha256 mismatch"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body(&c, &nodes[1], "/home").await.1, "home-v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_node_catches_up_and_a_node_without_etcd_waits_or_uses_its_cache() {
    let mut etcd = EtcdServer::start();
    push(&etcd, BASE);
    let early = node(&etcd, "early", "");
    let c = client();
    until_serves(&c, &early, "/home", "home-v1").await;
    let put = send(
        &c,
        "PUT",
        &early.admin_url("/routes/late"),
        &[],
        r#"{"path": {"prefix": "/late"}, "respond": {"body": "made before"}}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    let cache = tempfile::tempdir().unwrap();
    let cache_file = cache.path().join("cache.json");
    let late = node(
        &etcd,
        "late",
        &format!(r#", cache_file: "{}""#, cache_file.display()),
    );
    until_serves(&c, &late, "/late", "made before").await;
    until_file_holds(&cache_file, "made before").await;

    // etcd down: a node without a cache serves 503 and is not ready...
    etcd.kill();
    let blind = node(&etcd, "blind", "");
    let r = send(&c, "GET", &blind.url("/home"), &[], "").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "no_configuration");
    // Clients and probes learn nothing of etcd; /status (the operator's) does.
    let endpoint = etcd.url().trim_start_matches("http://").to_string();
    assert!(
        !r.text().contains(&endpoint) && !r.text().contains("etcd"),
        "{}",
        r.text()
    );
    let ready = send(&c, "GET", &blind.admin_url("/readyz"), &[], "").await;
    assert_eq!(ready.status, 503);
    assert!(!ready.text().contains(&endpoint), "{}", ready.text());
    let status = send(&c, "GET", &blind.admin_url("/status"), &[], "")
        .await
        .text();
    assert!(status.contains(&endpoint), "{status}");
    // ...one with a cache serves what it applied last.
    let cached = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
config: {{etcd: ["{}"], node_name: cached, cache_file: "{}"}}
"#,
        etcd.url(),
        cache_file.display()
    ));
    until_serves(&c, &cached, "/late", "made before").await;
    // etcd back: the waiting node gets its configuration.
    etcd.start_again();
    until_serves(&c, &blind, "/home", "home-v1").await;
    assert_eq!(
        send(&c, "GET", &blind.admin_url("/readyz"), &[], "")
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_in_redis_holds_for_the_cluster_not_per_node() {
    let etcd = EtcdServer::start();
    let mut redis = RedisServer::start();
    push(
        &etcd,
        &format!(
            r#"
services:
  - {{name: redis, redis: "{}"}}
plugins:
  - {{name: limit, wasm: "{{wasm:higress_rate_limit}}", services: [redis]}}
routes:
  - name: limited
    plugins: [{{plugin: limit, conf: {{redis: {{service_name: redis}}, limit: 5, window_seconds: 60, key_header: x-api-key}}}}]
    respond: {{status: 200, body: ok}}
"#,
            redis.url()
        ),
    );
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| node_granting(&etcd, &format!("node{i}"), "", "{services: [redis]}"))
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/other-key", "ok").await;
    }
    // 15 requests with one key, spread over the three nodes.
    let allowed = allowed_of_15(&c, &nodes, "shared").await;
    assert_eq!(allowed, 5, "the limit is the cluster's, not each node's");

    // Redis restarted (its counts gone): the first request on every node
    // is counted again, none slips through uncounted on a broken connection.
    redis.kill();
    redis.start_again();
    let allowed = allowed_of_15(&c, &nodes, "after-restart").await;
    assert_eq!(allowed, 5, "every request after the restart was counted");
}

/// How many of 15 requests with API key `key`, sent to the nodes in turn,
/// the rate limit let through (the others get 429).
async fn allowed_of_15(c: &HttpClient, nodes: &[GatewayProc], key: &str) -> usize {
    let mut allowed = 0;
    for i in 0..15 {
        let r = send(
            c,
            "GET",
            &nodes[i % nodes.len()].url("/"),
            &[("x-api-key", key)],
            "",
        )
        .await;
        match r.status {
            200 => allowed += 1,
            429 => {}
            other => panic!("{other}: {}", r.text()),
        }
    }
    allowed
}

/// `config push` refuses what `check` refuses (a module whose sha256 is not
/// the configuration's, a precompiled module), and pushes nothing; with
/// `--no-load` it pushes, the nodes reject it, and then an admin write says
/// that the configuration in etcd is rejected (not "retry"), and a node
/// started meanwhile says why it has nothing to serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_refused_by_push_and_explained_by_the_nodes() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    // These nodes allow precompiled modules from their own files: what
    // comes from etcd must be refused for where it comes from.
    let trusting = |name: &str, extra: &str| {
        GatewayProc::start(&format!(
            "listen: \"{{listen}}\"\nadmin: \"{{admin}}\"\nallow_precompiled: true\nconfig: {{etcd: [\"{}\"], node_name: {name}{extra}}}\n",
            etcd.url()
        ))
    };
    let writer = trusting("writer", "");
    let c = client();
    until_serves(&c, &writer, "/home", "home-v1").await;
    // A node that keeps a cache file, stopped while the configuration is good.
    let cache = tempfile::tempdir().unwrap();
    let cache_file = cache.path().join("cache.json");
    let cached_extra = format!(r#", cache_file: "{}""#, cache_file.display());
    let mut cached = trusting("cached", &cached_extra);
    until_serves(&c, &cached, "/home", "home-v1").await;
    until_file_holds(&cache_file, "home-v1").await;
    cached.terminate();
    let revision = etcd.etcdctl(&["get", "/wasmgate/changed", "-w", "json"]);
    let wrong_sha = format!(
        "plugins:\n  - {{name: tag, wasm: \"{{wasm:add_header}}\", sha256: \"{}\"}}\nroutes:\n  - {{name: home, path: {{prefix: /home}}, plugins: [{{plugin: tag}}], respond: {{body: bad}}}}\n",
        "0".repeat(64)
    );
    let (ok, text) = try_push(&etcd, &wrong_sha, &[]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("sha256 mismatch") && text.contains("nothing was pushed"),
        "{text}"
    );
    // Precompiled modules are native code: never from etcd.
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("add_header.cwasm");
    let compiled = crate::common::wasmgate()
        .args([
            "compile",
            crate::common::plugin("add_header").to_str().unwrap(),
            "-o",
        ])
        .arg(&cwasm)
        .output()
        .unwrap();
    assert!(compiled.status.success());
    let native = format!(
        "plugins:\n  - {{name: tag, wasm: \"{}\"}}\nroutes:\n  - {{name: home, path: {{prefix: /home}}, plugins: [{{plugin: tag}}], respond: {{body: native}}}}\n",
        cwasm.display()
    );
    let (ok, text) = try_push(&etcd, &native, &[]);
    assert!(!ok && text.contains("precompiled module"), "{text}");
    // Not even when the pushed file allows them for itself.
    let (ok, text) = try_push(&etcd, &format!("allow_precompiled: true\n{native}"), &[]);
    assert!(!ok && text.contains("precompiled module"), "{text}");
    assert_eq!(
        etcd.etcdctl(&["get", "/wasmgate/changed", "-w", "json"]),
        revision,
        "a refused push wrote nothing"
    );

    // Pushed anyway (--no-load checks only the file): every node rejects it.
    let (ok, text) = try_push(&etcd, &native, &["--no-load"]);
    assert!(ok, "{text}");
    let view = until_cluster(&c, &writer, |view| {
        view["nodes"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("precompiled module"))
    })
    .await;
    assert_eq!(view["nodes"][0]["healthy"], false, "{view}");
    assert_eq!(body(&c, &writer, "/home").await.1, "home-v1");
    // An admin write that leaves it broken: 422, saying why, not 409.
    let put = send(
        &c,
        "PUT",
        &writer.admin_url("/routes/more"),
        &[],
        r#"{"path": {"prefix": "/more"}, "respond": {"body": "more"}}"#,
    )
    .await;
    assert_eq!(put.status, 422, "{}", put.text());
    let text = put.text();
    assert!(text.contains("precompiled module"), "{text}");
    assert!(text.contains("already rejected by this node"), "{text}");
    assert!(text.contains("config push"), "{text}");
    // A node started now has nothing it can build, and says why.
    let fresh = trusting("fresh", "");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Clients learn only that there is nothing to serve; `/status`
        // (behind the admin token) says why.
        let r = send(&c, "GET", &fresh.url("/home"), &[], "").await;
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            r.text().contains(r#""kind":"no_configuration""#) && !r.text().contains("precompiled"),
            "{}",
            r.text()
        );
        let status = send(&c, "GET", &fresh.admin_url("/status"), &[], "").await;
        if status.json()["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("precompiled module"))
        {
            let ready = send(&c, "GET", &fresh.admin_url("/readyz"), &[], "").await;
            assert_eq!(ready.status, 503);
            assert!(!ready.text().contains("precompiled"), "{}", ready.text());
            break;
        }
        assert!(Instant::now() < deadline, "{}", status.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ... in its log too.
    fresh.logs_with(&["no configuration to serve", "precompiled module"]);
    // One with a cache file serves the configuration it last applied, and
    // its log says why.
    let cached = trusting("cached", &cached_extra);
    until_serves(&c, &cached, "/home", "home-v1").await;
    cached.logs_with(&["precompiled module", "serving the configuration cached"]);
    // An admin write that fixes it is accepted, and every node serves it.
    let fix = send(
        &c,
        "PUT",
        &writer.admin_url("/plugins/tag"),
        &[],
        format!(
            r#"{{"wasm": "{}"}}"#,
            crate::common::plugin("add_header").display()
        ),
    )
    .await;
    assert_eq!(fix.status, 200, "{}", fix.text());
    until_serves(&c, &writer, "/home", "native").await;
    until_serves(&c, &fresh, "/home", "native").await;
    until_serves(&c, &cached, "/home", "native").await;
}

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

/// The cache file holds every configuration a node applied, its own admin
/// writes included: restarted while etcd is down, it serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_the_cache_keeps_the_nodes_own_writes() {
    let mut etcd = EtcdServer::start();
    push(&etcd, BASE);
    let cache = tempfile::tempdir().unwrap();
    let cache_file = cache.path().join("cache.json");
    let extra = format!(r#", cache_file: "{}""#, cache_file.display());
    let c = client();
    let mut first = node(&etcd, "n", &extra);
    until_serves(&c, &first, "/home", "home-v1").await;
    let put = send(
        &c,
        "PUT",
        &first.admin_url("/routes/prop"),
        &[],
        r#"{"path": {"prefix": "/prop"}, "respond": {"body": "own write"}}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    first.terminate();
    etcd.kill();
    let again = node(&etcd, "n", &extra);
    until_serves(&c, &again, "/prop", "own write").await;
    until_serves(&c, &again, "/home", "home-v1").await;
}

/// Nodes serving the same configuration report the same revision (the
/// newest of its objects), whatever else moves etcd's revision (nodes
/// registering and leaving), and none is `behind`; after a change, all
/// report its revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_are_equal_and_nobody_is_behind_under_registration_churn() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| node(&etcd, &format!("node{i}"), ""))
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v1").await;
    }
    let revisions = |view: &Value| -> Vec<i64> {
        view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["node"].as_str().is_some_and(|n| n.starts_with("node")))
            .map(|n| n["revision"].as_i64().unwrap())
            .collect()
    };
    let metric = |gw: &GatewayProc| {
        let (c, url) = (c.clone(), gw.admin_url("/metrics"));
        async move {
            let text = send(&c, "GET", &url, &[], "").await.text();
            text.lines()
                .find_map(|l| l.strip_prefix("wasmgate_config_revision "))
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap()
        }
    };
    for round in 0..2 {
        // Churn: nodes come and go (each a registration and a revocation).
        for i in 0..3 {
            let mut passing = node(&etcd, &format!("passing{round}{i}"), "");
            until_serves(
                &c,
                &passing,
                "/home",
                if round == 0 { "home-v1" } else { "home-v2" },
            )
            .await;
            passing.terminate();
        }
        let view = until_cluster(&c, &nodes[0], |view| revisions(view).len() == 3).await;
        let seen = revisions(&view);
        assert!(seen.iter().all(|r| *r == seen[0]), "{view}");
        for n in view["nodes"].as_array().unwrap() {
            assert_eq!(n["behind"], false, "{view}");
        }
        for gw in &nodes {
            assert_eq!(metric(gw).await, seen[0], "{view}");
        }
        if round == 0 {
            push(&etcd, &BASE.replace("home-v1", "home-v2"));
            for gw in &nodes {
                until_serves(&c, gw, "/home", "home-v2").await;
            }
            let view = until_cluster(&c, &nodes[1], |view| {
                let r = revisions(view);
                r.len() == 3 && r.iter().all(|x| *x == r[0])
            })
            .await;
            assert!(revisions(&view)[0] > seen[0], "{view}");
        }
    }
}

/// A node stopped cleanly leaves `/cluster` at once (its lease revoked),
/// also when etcd restarted while it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_the_cluster_at_once() {
    let mut etcd = EtcdServer::start();
    push(&etcd, BASE);
    let stays = node(&etcd, "stays", "");
    let mut leaves = node(&etcd, "leaves", "");
    let c = client();
    until_serves(&c, &stays, "/home", "home-v1").await;
    until_serves(&c, &leaves, "/home", "home-v1").await;
    until_cluster(&c, &stays, |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 2)
    })
    .await;
    etcd.stop();
    etcd.start_again();
    // Both registered again (the view lists two once etcd answers).
    until_cluster(&c, &stays, |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 2)
    })
    .await;
    let status = leaves.terminate();
    assert!(status.success(), "{status}");
    let started = Instant::now();
    until_cluster(&c, &stays, |v| {
        v["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 1 && n[0]["node"] == "stays")
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "left after {:?}",
        started.elapsed()
    );
}

/// `behind` is true of a node that really serves an older configuration
/// than another: here one that cannot build the newest, whose plugin is a
/// path relative to each node's own file that only the other node has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_build_the_newest_configuration_is_behind() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    let has = node(&etcd, "has", "");
    let lacks = node(&etcd, "lacks", "");
    let c = client();
    until_serves(&c, &has, "/home", "home-v1").await;
    until_serves(&c, &lacks, "/home", "home-v1").await;
    std::fs::copy(
        crate::common::plugin("add_header"),
        has.dir().join("local.wasm"),
    )
    .unwrap();
    let behind = |view: &Value, name: &str| {
        view["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["node"] == name))
            .map(|n| n["behind"] == true)
    };
    // --no-load: the module is not beside the pushed file either.
    let v2 = BASE
        .replace("{wasm:add_header}", "local.wasm")
        .replace("home-v1", "home-v2");
    let (ok, text) = try_push(&etcd, &v2, &["--no-load"]);
    assert!(ok, "{text}");
    until_serves(&c, &has, "/home", "home-v2").await;
    // Rejected there (not merely late), and so behind.
    let rejected = |view: &Value| {
        view["nodes"].as_array().is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n["node"] == "lacks"
                    && n["last_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("local.wasm"))
            })
        })
    };
    let view = until_cluster(&c, &has, |view| {
        rejected(view) && behind(view, "lacks") == Some(true)
    })
    .await;
    assert_eq!(behind(&view, "has"), Some(false), "{view}");
    assert_eq!(body(&c, &lacks, "/home").await.1, "home-v1");
    // A configuration both can build: nobody is behind.
    push(&etcd, &BASE.replace("home-v1", "home-v3"));
    until_serves(&c, &lacks, "/home", "home-v3").await;
    until_cluster(&c, &has, |view| {
        behind(view, "lacks") == Some(false) && behind(view, "has") == Some(false)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_written_through_one_node_is_served_by_every_node() {
    let etcd = EtcdServer::start();
    push(&etcd, BASE);
    // Every node has a TLS listener in its own file; the certificates are
    // cluster configuration, and there are none yet. The third node's
    // listener names two certificates, of which only `shop` will come.
    let nodes: Vec<GatewayProc> = (1..=3)
        .map(|i| {
            let named = if i == 3 {
                "certificates: [shop, blog], "
            } else {
                ""
            };
            GatewayProc::start(&format!(
                r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners: [{{address: "{{tls_listen}}", tls: {{{named}unknown_sni: refuse}}}}]
config: {{etcd: ["{}"], node_name: node{i}}}
"#,
                etcd.url()
            ))
        })
        .collect();
    let c = client();
    for gw in &nodes {
        until_serves(&c, gw, "/home", "home-v1").await;
        // Its status says the listener has nothing to serve, and why.
        let problem = tls_listener_problem(&c, gw).await;
        assert!(problem.contains("no certificate to serve yet"), "{problem}");
        let refused = curl(
            "shop.example",
            gw.tls_port,
            "/home",
            Path::new("/dev/null"),
            &[],
        );
        assert!(!refused.ok, "a handshake without a certificate succeeded");
    }
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let body =
        serde_json::json!({"cert_pem": shop.cert_pem(), "key_pem": shop.key_pem()}).to_string();
    let put = send(
        &c,
        "PUT",
        &nodes[0].admin_url("/certificates/shop"),
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    for gw in &nodes {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let served = curl("shop.example", gw.tls_port, "/home", &pki.ca, &[]);
            if served.ok {
                assert_eq!((served.status, served.body.as_str()), (200, "home-v1"));
                break;
            }
            assert!(Instant::now() < deadline, "{}", served.stderr);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Read back through another node: the chain, never the key.
    let got = send(
        &c,
        "GET",
        &nodes[2].admin_url("/certificates/shop"),
        &[],
        "",
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.json()["cert_pem"], shop.cert_pem().as_str());
    assert!(!got.text().contains("PRIVATE KEY"), "{}", got.text());
    let config = send(&c, "GET", &nodes[1].admin_url("/config"), &[], "").await;
    assert!(!config.text().contains("PRIVATE KEY"), "{}", config.text());
    let list = send(&c, "GET", &nodes[1].admin_url("/certificates"), &[], "").await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list.text().contains("shop"), "{}", list.text());
    assert!(!list.text().contains("PRIVATE KEY"), "{}", list.text());
    let status = send(&c, "GET", &nodes[1].admin_url("/status"), &[], "")
        .await
        .json();
    assert_eq!(
        status["certificates"][0]["names"][0], "shop.example",
        "{status}"
    );
    // The listeners have what they need now, but the third lacks `blog`.
    for gw in &nodes[..2] {
        assert_eq!(tls_listener_problem(&c, gw).await, "", "node {}", gw.port);
    }
    let partial = tls_listener_problem(&c, &nodes[2]).await;
    assert!(partial.contains("not configured yet (blog)"), "{partial}");

    // A key that is not the certificate's: refused with the reason, and
    // every node keeps the one it has.
    let other = pki.server(&["shop.example"], KeyType::EcdsaP256, 2, 1);
    let mismatched =
        serde_json::json!({"cert_pem": shop.cert_pem(), "key_pem": other.key_pem()}).to_string();
    let put = send(
        &c,
        "PUT",
        &nodes[1].admin_url("/certificates/shop"),
        &[("content-type", "application/json")],
        mismatched,
    )
    .await;
    assert_eq!(put.status, 422, "{}", put.text());
    assert!(put.text().contains("do not match"), "{}", put.text());
    assert!(!put.text().contains("PRIVATE KEY"), "{}", put.text());
    for gw in &nodes {
        let served = curl("shop.example", gw.tls_port, "/home", &pki.ca, &[]);
        assert_eq!(served.status, 200, "{}", served.stderr);
    }

    // Deleted through node 2: refused everywhere again.
    let del = send(
        &c,
        "DELETE",
        &nodes[1].admin_url("/certificates/shop"),
        &[],
        "",
    )
    .await;
    assert_eq!(del.status, 200, "{}", del.text());
    for gw in &nodes {
        let deadline = Instant::now() + Duration::from_secs(20);
        while curl("shop.example", gw.tls_port, "/home", &pki.ca, &[]).ok {
            assert!(Instant::now() < deadline, "still served after the delete");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // `config push` of a file that names certificate files publishes their
    // PEM text: the nodes do not have the pusher's files.
    push(
        &etcd,
        &format!("{BASE}certificates: [{}]\n", certificate("shop", &shop)),
    );
    for gw in &nodes {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !curl("shop.example", gw.tls_port, "/home", &pki.ca, &[]).ok {
            assert!(
                Instant::now() < deadline,
                "the pushed certificate was never served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let got = send(
        &c,
        "GET",
        &nodes[1].admin_url("/certificates/shop"),
        &[],
        "",
    )
    .await;
    assert_eq!(got.json()["cert_pem"], shop.cert_pem().as_str());
    assert_eq!(got.json()["cert"], Value::Null);
}

/// The `problem` `/status` shows for a node's TLS listener ("" for none).
async fn tls_listener_problem(c: &HttpClient, gw: &GatewayProc) -> String {
    let status = send(c, "GET", &gw.admin_url("/status"), &[], "")
        .await
        .json();
    let address = format!("127.0.0.1:{}", gw.tls_port);
    let listener = status["listeners"]
        .as_array()
        .and_then(|all| all.iter().find(|l| l["address"] == address.as_str()))
        .unwrap_or_else(|| panic!("no listener {address} in {status}"))
        .clone();
    listener["problem"].as_str().unwrap_or("").to_string()
}
