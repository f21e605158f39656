//! Changes through the cluster: one made through any node reaches every
//! node, conflicting edits get 409, a broken or refused configuration is
//! explained everywhere, and a node that cannot build the newest one says
//! it is behind.

use super::{
    body, cluster, me, node, push, try_push, until_cluster, until_file_holds, until_no_route,
    until_serves, until_watched, BASE,
};
use crate::common::client;
use crate::common::gateway::{send, GatewayProc};
use serde_json::Value;
use std::time::{Duration, Instant};
use wasmgate_testkit::EtcdServer;

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
