//! The Kubernetes measurements (issue 36; docs/benchmarks.md "Kubernetes"),
//! against the same real kube-apiserver as the tests. A benchmark, not a
//! test: ignored by `make test`, run by `bench/kubernetes.py`, which plots
//! what it writes. In one run:
//!   - propagation: CHANGES HTTPRoutes created one after another; for each,
//!     the time from the create call to the node answering 200 on its path
//!     (polled every 2 ms);
//!   - loss: four clients keep a steady route busy meanwhile; every answer
//!     that is not 200 is a lost request;
//!   - scale: the node's memory and CPU time with ROUTES HTTPRoutes, the
//!     time until it serves them all, its CPU time idle for 10 s with them,
//!     and propagation again (20 changes) at that size.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::gateway::{send, GatewayProc};
use crate::common::kube::{create, interface_ip, route, service, until_status, Cluster};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient};
use gateway_api::httproutes::HttpRoute;
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory (MiB) and CPU time so far (s) of process `pid`.
fn usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: f64 = (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    (rss_kb / 1024.0, ticks / 100.0)
}

/// Milliseconds from creating an HTTPRoute for `path` until the node serves it.
async fn propagation(k: &kube::Client, c: &HttpClient, gw: &GatewayProc, name: &str) -> f64 {
    let path = format!("/{name}");
    let started = Instant::now();
    create::<HttpRoute>(
        k,
        route(
            name,
            json!([{"matches": [{"path": {"type": "Exact", "value": path}}],
                    "backendRefs": [{"name": "app", "port": 80}]}]),
        ),
    )
    .await;
    loop {
        if send(c, "GET", &gw.url(&path), &[], "").await.status == 200 {
            return started.elapsed().as_secs_f64() * 1000.0;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} never served"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "n": ms.len(), "p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99),
        "max_ms": ms[ms.len() - 1], "all_ms": ms,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bench/kubernetes.py runs it"]
async fn kubernetes_propagation_loss_and_scale() {
    let changes = env_or("CHANGES", 100);
    let scale = env_or("ROUTES", 1000);
    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    let gw = cluster.node("");
    let pid = gw.child.id();
    let c = client();
    create::<HttpRoute>(
        &k,
        route(
            "steady",
            json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/steady"}}],
                    "backendRefs": [{"name": "app", "port": 80}]}]),
        ),
    )
    .await;
    until_status(&c, &gw, "/steady", 200).await;
    let (rss_start, _) = usage(pid);

    // Propagation under load, and what the load lost.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, lost) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (c, url) = (c.clone(), gw.url("/steady"));
            let (stop, ok, lost) = (stop.clone(), ok.clone(), lost.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let counter = if send(&c, "GET", &url, &[], "").await.status == 200 {
                        &ok
                    } else {
                        &lost
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut small = Vec::new();
    for i in 0..changes {
        small.push(propagation(&k, &c, &gw, &format!("p{i}")).await);
    }
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }

    // Scale: ROUTES HTTPRoutes in all, created 16 at a time.
    let (_, cpu_before) = usage(pid);
    let started = Instant::now();
    let names: Vec<String> = (changes + 1..scale).map(|i| format!("s{i}")).collect();
    for batch in names.chunks(16) {
        let creates: Vec<_> = (batch.iter())
            .map(|name| {
                let (k, name) = (k.clone(), name.clone());
                tokio::spawn(async move {
                    let path = format!("/{name}");
                    create::<HttpRoute>(
                        &k,
                        route(
                            &name,
                            json!([{"matches": [{"path": {"type": "Exact", "value": path}}],
                                    "backendRefs": [{"name": "app", "port": 80}]}]),
                        ),
                    )
                    .await;
                })
            })
            .collect();
        for task in creates {
            task.await.unwrap();
        }
    }
    if let Some(last) = names.last() {
        until_status(&c, &gw, &format!("/{last}"), 200).await;
    }
    let all_served_s = started.elapsed().as_secs_f64();
    let (rss_scaled, cpu_after) = usage(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, cpu_idle_end) = usage(pid);
    let mut large = Vec::new();
    for i in 0..20 {
        large.push(propagation(&k, &c, &gw, &format!("q{i}")).await);
    }
    let (_, cpu_end) = usage(pid);
    let status = send(&c, "GET", &gw.admin_url("/status"), &[], "")
        .await
        .json();

    let result = json!({
        "changes": changes,
        "propagation": summary(small),
        "load": {"ok": ok.load(Ordering::Relaxed), "lost": lost.load(Ordering::Relaxed)},
        "scale": {
            "httproutes": scale,
            "routes_served": status["config"]["kubernetes"]["routes"],
            "rss_mib_start": rss_start,
            "rss_mib_at_scale": rss_scaled,
            "seconds_until_all_served": all_served_s,
            "cpu_s_to_take_them": cpu_after - cpu_before,
            "cpu_s_idle_10s": cpu_idle_end - cpu_after,
            "propagation": summary(large),
            "cpu_s_per_change_at_scale": (cpu_end - cpu_idle_end) / 20.0,
        },
    });
    let out = std::env::var("WASMGATE_BENCH_OUT")
        .unwrap_or_else(|_| "../../bench/results/kubernetes.json".into());
    std::fs::write(&out, serde_json::to_string_pretty(&result).unwrap()).unwrap();
    println!("{result:#}");
}
