//! Hot reload of `wasmgate run`: configuration and plugin modules change
//! under steady traffic; good changes are served, bad ones are rejected with
//! their reason while the previous version keeps serving, and no request fails.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::gateway::{get, metric, send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, plugin};

fn config(answer: &str, filter_wasm: &str) -> String {
    config_with_conf(answer, filter_wasm, "from-config")
}

fn config_with_conf(answer: &str, filter_wasm: &str, conf: &str) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: filter, wasm: "{filter_wasm}"}}
routes:
  - name: filtered
    path: {{prefix: /filtered}}
    plugins: [{{plugin: filter, conf: "{conf}"}}]
    respond: {{status: 200, body: "{answer}"}}
  - {{name: plain, respond: {{status: 200, body: "{answer}"}}}}
"#
    )
}

/// Polls `url` until its body is `want` (or panics after 20 s).
async fn wait_for_body(c: &crate::common::HttpClient, url: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(c, url).await;
        if r.text() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still {:?}, want {want:?}",
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replaces a file atomically.
fn replace(path: &std::path::Path, bytes: &[u8]) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, bytes).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_and_plugin_changes_reload_without_failing_a_request() {
    let gw = GatewayProc::start(&config("v1", "{wasm:add_header}"));
    // From here on the filter is a copy the test can replace.
    let filter = gw.dir().join("filter.wasm");
    std::fs::copy(plugin("add_header"), &filter).unwrap();
    gw.rewrite(&config("v1", filter.to_str().unwrap()));
    let c = client();
    wait_for_body(&c, &gw.url("/"), "v1").await;

    // Steady traffic on keep-alive connections for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load: Vec<_> = (0..4)
        .map(|i| {
            let (c, url) = (
                c.clone(),
                gw.url(if i % 2 == 0 { "/" } else { "/filtered" }),
            );
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = get(&c, &url).await;
                    if r.status == 200 && r.text().starts_with('v') {
                        ok.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    // A good change: served.
    gw.rewrite(&config("v2", filter.to_str().unwrap()));
    wait_for_body(&c, &gw.url("/"), "v2").await;

    // Broken YAML: rejected, v2 keeps serving, the status says why.
    gw.rewrite("routes: [unclosed");
    let status = wait_for_failed_reloads(&c, &gw, 1).await;
    assert!(
        status["reload"]["last_error"]
            .as_str()
            .unwrap()
            .contains("wasmgate.yaml"),
        "{status}"
    );
    assert_eq!(get(&c, &gw.url("/")).await.text(), "v2");
    assert!(gw.logs().contains("reload rejected"), "{}", gw.logs());

    // A malformed plugin binary: rejected whole (the answer stays v2 too).
    replace(&filter, b"\0asm garbage");
    gw.rewrite(&config("v3-never", filter.to_str().unwrap()));
    let status = wait_for_failed_reloads(&c, &gw, 2).await;
    assert!(
        status["reload"]["last_error"]
            .as_str()
            .unwrap()
            .contains("plugins[filter]"),
        "{status}"
    );
    assert_eq!(get(&c, &gw.url("/")).await.text(), "v2");

    // A new plugin binary: the filter's behaviour changes (http_config sets
    // `custom-header` from its configuration; add_header did not).
    let before = get(&c, &gw.url("/filtered")).await;
    assert_eq!(before.header("x-seen-path").unwrap(), "/filtered");
    replace(&filter, &std::fs::read(plugin("http_config")).unwrap());
    gw.rewrite(&config("v4", filter.to_str().unwrap()));
    wait_for_body(&c, &gw.url("/"), "v4").await;
    let after = get(&c, &gw.url("/filtered")).await;
    assert_eq!(after.header("custom-header").unwrap(), "from-config");
    assert!(after.header("x-seen-path").is_none());

    // A filter that refuses its configuration (http_config refuses an empty
    // one in proxy_on_configure): rejected, v4 keeps serving.
    gw.rewrite(&config_with_conf("v5-never", filter.to_str().unwrap(), ""));
    let status = wait_for_failed_reloads(&c, &gw, 3).await;
    assert!(
        status["reload"]["last_error"]
            .as_str()
            .unwrap()
            .contains("proxy_on_configure"),
        "{status}"
    );
    assert_eq!(get(&c, &gw.url("/")).await.text(), "v4");
    gw.rewrite(&config("v4", filter.to_str().unwrap()));

    // POST /reload answers with the outcome.
    let r = send(
        &c,
        "POST",
        &gw.admin_url("/reload"),
        &[("content-type", "application/json")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["reloaded"], true);

    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 100, "only {ok} requests went through");
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed during reloads",
        ok + failed
    );
    let metrics = get(&c, &gw.admin_url("/metrics")).await.text();
    assert!(
        metrics.contains("wasmgate_config_reload_failures_total 3"),
        "{metrics}"
    );
}

/// A gateway whose filter (the Rust SDK's http_auth_random) asks upstream
/// `auth-service` (at `auth`) before each request; `answer` is another
/// route's fixed answer and `timeout_ms` one of the filter's settings.
fn kept_filter_config(backend: &str, auth: &str, answer: &str, timeout_ms: u32) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: auth, wasm: "{{wasm:http_auth_random}}", timeout_ms: {timeout_ms}}}
upstreams:
  - {{name: backend, nodes: [{{address: "{backend}"}}]}}
  - {{name: auth-service, nodes: [{{address: "{auth}"}}]}}
routes:
  - {{name: plain, path: {{prefix: /plain}}, respond: {{status: 200, body: "{answer}"}}}}
  - {{name: all, plugins: [{{plugin: auth, conf: {{upstream: auth-service}}}}], upstream: backend}}
"#
    )
}

/// A reload that leaves a filter as it was keeps it (no new instance, no
/// new start), and the kept filter's calls go to the upstreams of the
/// configuration now served; a reload that changes a filter's settings
/// starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_filter_is_kept_and_calls_the_new_upstreams() {
    let backend = Upstream::start("backend").await;
    let (auth1, auth2) = (
        Upstream::start("auth-1").await,
        Upstream::start("auth-2").await,
    );
    let config = |auth: &Upstream, answer: &str, timeout_ms| {
        kept_filter_config(&backend.address(), &auth.address(), answer, timeout_ms)
    };
    let gw = GatewayProc::start(&config(&auth1, "v1", 1000));
    let c = client();
    let data = gw.url("/data");
    let allowed = || send(&c, "GET", &data, &[("x-token", "allow")], "");
    assert_eq!(allowed().await.status, 200);
    assert_eq!((auth1.hits(), auth2.hits()), (1, 0));
    let created = r#"wasmgate_plugin_instances_created_total{plugin="auth",route="all"}"#;
    let instances = metric(&c, &gw, created).await;
    assert!(instances >= 1.0);

    // Another route changes, and where `auth-service` is: the filter is kept.
    gw.rewrite(&config(&auth2, "v2", 1000));
    wait_for_body(&c, &gw.url("/plain"), "v2").await;
    let status = get(&c, &gw.admin_url("/status")).await.json();
    assert_eq!(status["reload"]["filters"], 1, "{status}");
    assert_eq!(status["reload"]["filters_kept"], 1, "{status}");
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_config_filters{origin="kept"}"#).await,
        1.0
    );
    assert_eq!(allowed().await.status, 200);
    assert_eq!(
        metric(&c, &gw, created).await,
        instances,
        "no instance started"
    );
    // Its callout went to the node the configuration names now.
    assert_eq!((auth1.hits(), auth2.hits()), (1, 1));

    // The filter's own settings change: started again.
    gw.rewrite(&config(&auth2, "v3", 2000));
    wait_for_body(&c, &gw.url("/plain"), "v3").await;
    let status = get(&c, &gw.admin_url("/status")).await.json();
    assert_eq!(status["reload"]["filters_kept"], 0, "{status}");
    assert_eq!(
        metric(&c, &gw, r#"wasmgate_config_filters{origin="started"}"#).await,
        1.0
    );
    assert_eq!(allowed().await.status, 200);
    assert_eq!((auth1.hits(), auth2.hits()), (1, 2));
}

async fn wait_for_failed_reloads(
    c: &crate::common::HttpClient,
    gw: &GatewayProc,
    n: u64,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = get(c, &gw.admin_url("/status")).await.json();
        if status["reload"]["failed_reloads"].as_u64() == Some(n) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "no failed reload reported: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads() {
    // No file watching: only the signal can make it reload.
    let gw = GatewayProc::start_with(&config("v1", "{wasm:add_header}"), &["--no-watch"]);
    let c = client();
    assert_eq!(get(&c, &gw.url("/")).await.text(), "v1");
    // Nothing watches the file: only the signal reloads it.
    let status = get(&c, &gw.admin_url("/status")).await.json();
    assert!(status["watch"].is_null(), "{status}");
    gw.rewrite(&config("v2", "{wasm:add_header}"));
    assert_eq!(
        get(&c, &gw.url("/")).await.text(),
        "v1",
        "--no-watch: no reload yet"
    );
    let pid = gw.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_for_body(&c, &gw.url("/"), "v2").await;
    let status = get(&c, &gw.admin_url("/status")).await.json();
    assert!(
        status["reload"]["generation"].as_u64().unwrap() >= 2,
        "{status}"
    );
}

/// A filter whose `proxy_on_vm_start` spins for three seconds of wall-clock
/// time (as a heavy plugin's start does, Higress's WAF with the OWASP rules
/// for about a minute), then passes every request.
const SLOW_START: &str = r#"(module
  (import "env" "proxy_get_current_time_nanoseconds" (func $now (param i32) (result i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32)
    (local $p i32) (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 0))) (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (local $until i64)
    (drop (call $now (i32.const 0)))
    (local.set $until (i64.add (i64.load (i32.const 0)) (i64.const 3000000000)))
    (loop $spin
      (drop (call $now (i32.const 0)))
      (br_if $spin (i64.lt_u (i64.load (i32.const 0)) (local.get $until))))
    (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
)"#;

/// The status of plugin `name` in `/status`.
async fn plugin_status(
    c: &crate::common::HttpClient,
    gw: &GatewayProc,
    name: &str,
) -> serde_json::Value {
    let status = get(c, &gw.admin_url("/status")).await.json();
    let plugins = status["plugins"].as_array().unwrap().clone();
    (plugins.into_iter())
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no plugin {name} in {status}"))
}

/// Polls until plugin `name`'s state is `want` (20 s at most).
async fn until_plugin_state(
    c: &crate::common::HttpClient,
    gw: &GatewayProc,
    name: &str,
    want: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = plugin_status(c, gw, name).await;
        if status["state"] == want {
            return;
        }
        assert!(Instant::now() < deadline, "still {status}, want {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A filter whose start outlasts `limits.filter_start_wait_ms` does not
/// hold the reload: the other routes change at once, the filter's route
/// answers 503 `plugin_starting` while it starts (or is served by the
/// filter's version before, when there is one), and the node reloads with
/// it when its start ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_starts_slowly_starts_in_the_background() {
    let backend = Upstream::start("backend").await;
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.wat");
    std::fs::write(&slow, SLOW_START).unwrap();
    let config = |answer: &str, slow_route: &str| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
limits: {{filter_start_wait_ms: 300}}
plugins:
  - {{name: slow, wasm: "{slow}"}}
upstreams: [{{name: backend, nodes: [{{address: "{backend}"}}]}}]
routes:
  - {{name: plain, path: {{prefix: /plain}}, respond: {{status: 200, body: "{answer}"}}}}
{slow_route}"#,
            slow = slow.display(),
            backend = backend.address()
        )
    };
    let route = |conf: &str| {
        format!("  - {{name: slow, path: {{prefix: /slow}}, plugins: [{{plugin: slow, conf: {conf}}}], upstream: backend}}\n")
    };
    let gw = GatewayProc::start(&config("v1", ""));
    let c = client();

    // A new route with the slow filter: the reload is served at once.
    gw.rewrite(&config("v2", &route("one")));
    wait_for_body(&c, &gw.url("/plain"), "v2").await;
    let status = plugin_status(&c, &gw, "slow").await;
    assert_eq!(status["state"], "starting", "{status}");
    assert_eq!(status["starting_routes"][0]["route"], "slow", "{status}");
    let r = get(&c, &gw.url("/slow")).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "plugin_starting");
    assert_eq!(r.header("retry-after"), Some("2"));
    let series = r#"wasmgate_filter_starting_since_seconds{plugin="slow",route="slow"}"#;
    assert!(metric(&c, &gw, series).await > 0.0);
    // A node already serving stays ready.
    assert_eq!(get(&c, &gw.admin_url("/readyz")).await.status, 200);
    // The start ends: the node reloads and serves the route with it.
    until_plugin_state(&c, &gw, "slow", "ready").await;
    let r = get(&c, &gw.url("/slow")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        gw.logs().contains("the filter's start ended"),
        "{}",
        gw.logs()
    );

    // A changed filter: its version before serves while the new one starts.
    gw.rewrite(&config("v3", &route("two")));
    wait_for_body(&c, &gw.url("/plain"), "v3").await;
    let status = plugin_status(&c, &gw, "slow").await;
    assert_eq!(status["state"], "updating", "{status}");
    assert_eq!(
        status["starting_routes"][0]["previous_serves"], true,
        "{status}"
    );
    assert_eq!(get(&c, &gw.url("/slow")).await.status, 200);
    until_plugin_state(&c, &gw, "slow", "ready").await;
    assert_eq!(get(&c, &gw.url("/slow")).await.status, 200);
}

/// A filter whose start grows its memory by 40 pages (2.5 MiB, 2.56 MiB in
/// all) and whose request callback grows it by one more page when its
/// conf is longer than `{}`.
const GROWING: &str = r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (global $grows (mut i32) (i32.const 0))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32)
    (local $p i32) (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 0))) (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
    (drop (memory.grow (i32.const 40))) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (global.set $grows (i32.gt_u (local.get 1) (i32.const 2))) (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (if (global.get $grows) (then (drop (memory.grow (i32.const 1)))))
    (i32.const 0))
)"#;

/// `startup_memory_limit_mb` caps the start on its own: a start that needs
/// more than `memory_limit_mb` succeeds under it, the callbacks then may
/// not grow the memory past what the start left, and without it the same
/// start is refused (the reload rejected, the node serving on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_has_a_memory_cap_of_its_own() {
    let backend = Upstream::start("backend").await;
    let dir = tempfile::tempdir().unwrap();
    let growing = dir.path().join("growing.wat");
    std::fs::write(&growing, GROWING).unwrap();
    let config = |start_cap: &str| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: growing, wasm: "{growing}", memory_limit_mb: 2{start_cap}}}
upstreams: [{{name: backend, nodes: [{{address: "{backend}"}}]}}]
routes:
  - {{name: still, path: {{prefix: /still}}, plugins: [{{plugin: growing, conf: {{}}}}], upstream: backend}}
  - {{name: grows, path: {{prefix: /grows}}, plugins: [{{plugin: growing, conf: {{grow: 1}}}}], upstream: backend}}
"#,
            growing = growing.display(),
            backend = backend.address()
        )
    };
    let gw = GatewayProc::start(&config(", startup_memory_limit_mb: 3"));
    let c = client();
    // Started under the start's cap; a callback that does not grow serves.
    assert_eq!(get(&c, &gw.url("/still")).await.status, 200);
    // A callback growing past what the start left fails (closed), and the
    // log says why.
    let r = get(&c, &gw.url("/grows")).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.json()["error"]["kind"], "filter_failed", "{}", r.text());
    crate::common::wait_for_log(|| gw.logs(), "memory cap exceeded");
    assert_eq!(get(&c, &gw.url("/still")).await.status, 200);

    // The same start under memory_limit_mb alone: refused, the node serves on.
    gw.rewrite(&config(""));
    let status = wait_for_failed_reloads(&c, &gw, 1).await;
    let error = status["reload"]["last_error"].as_str().unwrap();
    assert!(error.contains("memory cap exceeded"), "{status}");
    assert!(error.contains("start-up"), "{status}");
    assert_eq!(get(&c, &gw.url("/still")).await.status, 200);
}
