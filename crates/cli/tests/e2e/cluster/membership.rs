//! Nodes coming and going: etcd going away under traffic, a late node
//! catching up, a restart from the cache, registrations churning, and a
//! clean stop leaving the cluster at once.

use super::{node, push, until_cluster, until_file_holds, until_serves, BASE};
use crate::common::client;
use crate::common::gateway::{send, GatewayProc};
use serde_json::Value;
use std::time::{Duration, Instant};
use wasmgate_testkit::EtcdServer;

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
