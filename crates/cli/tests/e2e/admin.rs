//! The admin API of `wasmgate run` over real HTTP: configuration writes
//! (applied whole or refused whole, kept in the admin file), the token,
//! per-plugin metrics and status with crash reports, route concurrency
//! limits, buffering limits and CPU profiles.

use std::time::Duration;

use crate::common::gateway::{get, send, with_upstream, GatewayProc};
use crate::common::{client, HttpClient, Reply};

/// Sends an admin request with an optional bearer token, marked as
/// deliberate (`X-Wasmgate-Admin`) as a script would.
async fn admin(
    c: &HttpClient,
    gw: &GatewayProc,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = vec![("x-wasmgate-admin", "1")];
    headers.extend(auth.as_deref().map(|a| ("authorization", a)));
    send(c, method, &gw.admin_url(path), &headers, body.to_string()).await
}

/// The value of the series `name{labels}` in a Prometheus scrape.
fn metric(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_upstreams_and_plugins_are_changed_whole_or_not_at_all() {
    let (backend, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
admin_writes: true
plugins:
  - {name: tag, wasm: "{wasm:add_header}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - {name: home, path: {prefix: /home}, respond: {status: 200, body: home}}
"#,
    )
    .await;
    let c = client();
    let operators_file = std::fs::read_to_string(&gw.config).unwrap();

    // A new route using the plugin and the upstream: created, then serving.
    let put = admin(
        &c,
        &gw,
        "PUT",
        "/routes/api",
        None,
        r#"{"path": {"prefix": "/api"}, "plugins": [{"plugin": "tag", "conf": "via-admin"}], "upstream": "backend"}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    assert_eq!(put.json()["generation"], 2);
    let r = get(&c, &gw.url("/api/x")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["headers"]["x-wasmgate-filter"], "via-admin");
    // Kept in the admin file beside the configuration, which stays as the
    // operator wrote it: a restart (or a reload) keeps the change.
    let kept = std::fs::read_to_string(gw.dir().join("wasmgate.admin.yaml")).unwrap();
    assert!(kept.contains("via-admin"), "{kept}");
    // Only what was said: no `prefix: null`, `methods: []` and the like.
    assert!(!kept.contains("null") && !kept.contains("[]"), "{kept}");
    assert_eq!(std::fs::read_to_string(&gw.config).unwrap(), operators_file);

    // Replacing it in place, as YAML.
    let put = admin(
        &c,
        &gw,
        "PUT",
        "/routes/api",
        None,
        "path: {prefix: /api}\nplugins: [{plugin: tag, conf: second}]\nupstream: backend\n",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let r = get(&c, &gw.url("/api/x")).await;
    assert_eq!(r.json()["headers"]["x-wasmgate-filter"], "second");

    // Refused whole: an unknown upstream, a plugin that is not wasm, deleting
    // an upstream a route uses. Each names its reason; nothing changes.
    let bad = admin(
        &c,
        &gw,
        "PUT",
        "/routes/api",
        None,
        r#"{"path": {"prefix": "/api"}, "upstream": "nowhere"}"#,
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.text());
    // The reason names the route by its name and the file it is kept in.
    let reason = bad.json()["reasons"][0].as_str().unwrap().to_string();
    assert!(
        reason.contains(
            "wasmgate.admin.yaml: routes[api].upstream: no upstream named `nowhere` in `upstreams`: declare it there"
        ),
        "{reason}"
    );
    std::fs::write(gw.dir().join("junk.wasm"), b"not wasm").unwrap();
    let bad = admin(
        &c,
        &gw,
        "PUT",
        "/plugins/junk",
        None,
        r#"{"wasm": "junk.wasm"}"#,
    )
    .await;
    assert_eq!(bad.status, 422, "{}", bad.text());
    assert!(
        bad.text().contains("not a WebAssembly module"),
        "{}",
        bad.text()
    );
    let bad = admin(&c, &gw, "DELETE", "/upstreams/backend", None, "").await;
    assert_eq!(bad.status, 422, "{}", bad.text());
    let reason = bad.json()["reasons"][0].as_str().unwrap().to_string();
    assert!(
        reason.contains("upstream `backend` is still used by routes[")
            && reason.contains("routes[api].upstream"),
        "{reason}"
    );
    let r = get(&c, &gw.url("/api/x")).await;
    assert_eq!(r.json()["headers"]["x-wasmgate-filter"], "second");
    let status = admin(&c, &gw, "GET", "/status", None, "").await.json();
    assert_eq!(status["reload"]["generation"], 3);
    assert_eq!(status["reload"]["failed_reloads"], 3);
    // The last rejection, with its time, until a change goes through.
    assert!(
        status["reload"]["last_error"]
            .as_str()
            .unwrap()
            .contains("DELETE upstream backend"),
        "{status}"
    );
    assert!(status["reload"]["last_error_at_ms"].as_u64().unwrap() > 0);

    // Body and path disagree; unknown field: 400 before anything is tried.
    let r = admin(&c, &gw, "PUT", "/routes/api", None, r#"{"name": "other"}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = admin(&c, &gw, "PUT", "/upstreams/u", None, r#"{"nodez": []}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("nodez"), "{}", r.text());

    // Reads.
    let routes = admin(&c, &gw, "GET", "/routes", None, "").await.json();
    assert_eq!(routes.as_array().unwrap().len(), 2);
    let one = admin(&c, &gw, "GET", "/upstreams/backend", None, "").await;
    assert_eq!(one.json()["nodes"][0]["address"], backend.address());
    assert_eq!(
        admin(&c, &gw, "GET", "/plugins/nope", None, "")
            .await
            .status,
        404
    );

    // Deleting the route: its traffic finds no route.
    let del = admin(&c, &gw, "DELETE", "/routes/api", None, "").await;
    assert_eq!(del.status, 200, "{}", del.text());
    let status = admin(&c, &gw, "GET", "/status", None, "").await.json();
    assert!(status["reload"]["last_error"].is_null(), "{status}");
    assert!(status["reload"]["last_error_at_ms"].is_null(), "{status}");
    assert_eq!(get(&c, &gw.url("/api/x")).await.status, 404);
    assert_eq!(
        admin(&c, &gw, "DELETE", "/routes/api", None, "")
            .await
            .status,
        404
    );
    assert_eq!(get(&c, &gw.url("/home")).await.text(), "home");

    // The admin write did not trigger a second (file-watch) reload; with the
    // route deleted nothing differs from the operator's file, which was
    // never written. Checked once the watcher has looked at the files three
    // more times (it reloads on the second look at a change).
    let polls = |status: &serde_json::Value| status["watch"]["polls"].as_u64().unwrap();
    let looked = polls(&admin(&c, &gw, "GET", "/status", None, "").await.json());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = admin(&c, &gw, "GET", "/status", None, "").await.json();
        if polls(&status) >= looked + 3 {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["reload"]["generation"], 4, "{status}");
    assert!(!gw.dir().join("wasmgate.admin.yaml").exists());
    assert_eq!(std::fs::read_to_string(&gw.config).unwrap(), operators_file);
    let openapi = admin(&c, &gw, "GET", "/openapi.yaml", None, "").await;
    assert!(openapi.text().contains("/routes/{name}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_everything_but_the_probes() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
admin_token: s3cret
routes:
  - {name: all, respond: {status: 200, body: ok}}
"#,
    );
    let c = client();
    assert_eq!(
        admin(&c, &gw, "GET", "/healthz", None, "").await.status,
        200
    );
    assert_eq!(admin(&c, &gw, "GET", "/readyz", None, "").await.status, 200);
    assert_eq!(admin(&c, &gw, "GET", "/status", None, "").await.status, 401);
    assert_eq!(
        admin(&c, &gw, "GET", "/metrics", Some("wrong"), "")
            .await
            .status,
        401
    );
    assert_eq!(
        admin(&c, &gw, "POST", "/reload", Some("s3cre"), "")
            .await
            .status,
        401
    );
    assert_eq!(
        admin(&c, &gw, "GET", "/status", Some("s3cret"), "")
            .await
            .status,
        200
    );
    let config = admin(&c, &gw, "GET", "/config", Some("s3cret"), "").await;
    assert!(!config.text().contains("s3cret"), "{}", config.text());

    // Bound beyond loopback without a token: refused before it starts.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("open.yaml");
    std::fs::write(&file, "admin: 0.0.0.0:0\nroutes: []\n").unwrap();
    let out = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&file)
        .env_remove("WASMGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a token"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_metrics_status_and_crash_reports() {
    let (backend, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: tag, wasm: "{wasm:add_header}"}
  - {name: faults, wasm: "{wasm:faults}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - {name: api, path: {prefix: /api}, plugins: [{plugin: tag}], upstream: backend}
  - {name: fn, path: {prefix: /fn/}, function: {plugin: faults}}
"#,
    )
    .await;
    let c = client();
    for _ in 0..5 {
        assert_eq!(get(&c, &gw.url("/api/x")).await.status, 200);
    }
    let trap = send(&c, "POST", &gw.url("/fn/trap"), &[], "").await;
    assert_eq!(trap.status, 500, "{}", trap.text());

    let scrape = admin(&c, &gw, "GET", "/metrics", None, "").await.text();
    let tag = r#"plugin="tag",route="api""#;
    // Each request runs several callbacks (context create, headers both ways,
    // log...) in at least two guest calls: the request's (context create and
    // headers) and, for these small answers, the response's (headers, body
    // and the stream's end, batch.rs).
    let calls = metric(
        &scrape,
        &format!("wasmgate_plugin_call_seconds_count{{{tag}}}"),
    )
    .unwrap();
    assert!(calls >= 10.0, "{calls} calls\n{scrape}");
    assert!(metric(&scrape, &format!("wasmgate_plugin_memory_bytes{{{tag}}}")).unwrap() > 0.0);
    let idle = metric(
        &scrape,
        &format!("wasmgate_plugin_instances{{{tag},state=\"idle\"}}"),
    );
    assert!(idle.unwrap() >= 1.0, "{scrape}");
    let faults = r#"plugin="faults",route="""#;
    let traps = format!("wasmgate_plugin_failures_total{{{faults},kind=\"trap\"}}");
    assert_eq!(metric(&scrape, &traps), Some(1.0), "{scrape}");
    let restarts = format!("wasmgate_plugin_restarts_total{{{faults}}}");
    assert_eq!(metric(&scrape, &restarts), Some(1.0), "{scrape}");
    let api_2xx = r#"wasmgate_route_requests_total{route="api",class="2xx"}"#;
    assert_eq!(metric(&scrape, api_2xx), Some(5.0));
    assert_eq!(
        metric(
            &scrape,
            r#"wasmgate_route_response_seconds_count{route="api"}"#
        ),
        Some(5.0)
    );
    let node = format!(
        r#"wasmgate_upstream_node_response_seconds_count{{upstream="backend",node="{}"}}"#,
        backend.address()
    );
    assert_eq!(metric(&scrape, &node), Some(5.0), "{scrape}");
    // The five sequential requests reused pooled connections, still open.
    let open = format!(
        r#"wasmgate_upstream_node_connections{{upstream="backend",node="{}"}}"#,
        backend.address()
    );
    let open = metric(&scrape, &open).unwrap();
    assert!((1.0..5.0).contains(&open), "{open} connections\n{scrape}");
    // CPU time is counted, and within the calls' wall-clock time.
    let cpu = metric(
        &scrape,
        &format!("wasmgate_plugin_cpu_seconds_total{{{tag}}}"),
    )
    .unwrap();
    let wall = metric(
        &scrape,
        &format!("wasmgate_plugin_call_seconds_sum{{{tag}}}"),
    )
    .unwrap();
    assert!(cpu > 0.0 && cpu <= wall, "cpu {cpu} s, wall {wall} s");

    // The plugin status page: hash, pools, counters, last crash with file:line.
    let status = admin(&c, &gw, "GET", "/plugins/faults/status", None, "")
        .await
        .json();
    assert_eq!(status["sha256"].as_str().unwrap().len(), 64);
    let set = &status["instance_sets"][0];
    assert_eq!(set["stats"]["traps"], 1);
    let crash = &set["last_crash"]["report"];
    assert_eq!(crash["function"], "trap");
    let frames = crash["frames"].as_array().unwrap();
    assert!(
        frames.iter().any(|f| f["function"]
            .as_str()
            .unwrap()
            .contains("explode_on_purpose")
            && f["file"].as_str().is_some_and(|file| file.ends_with(".rs"))
            && f["line"].as_u64().is_some()),
        "{crash}"
    );
    let tag_status = admin(&c, &gw, "GET", "/plugins/tag/status", None, "")
        .await
        .json();
    assert_eq!(tag_status["instance_sets"][0]["route"], "api");
    assert!(tag_status["instance_sets"][0]["last_crash"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_route_answers_503_with_retry_after_instead_of_queueing() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: faults, wasm: "{wasm:faults}", pool_size: 4}
routes:
  - {name: slow, path: {prefix: /fn/}, function: {plugin: faults}, max_concurrent_requests: 1}
"#,
    );
    let c = client();
    let busy = {
        let (c, url) = (c.clone(), gw.url("/fn/sleep_ms"));
        tokio::spawn(async move { send(&c, "POST", &url, &[], "800").await })
    };
    // Once the first request is in its call (an instance in use)...
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = admin(&c, &gw, "GET", "/plugins/faults/status", None, "")
            .await
            .json();
        if status["instance_sets"][0]["pool"]["in_use"].as_u64() == Some(1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = send(&c, "POST", &gw.url("/fn/sleep_ms"), &[], "1").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.json()["error"]["kind"], "route_overloaded");
    let first = busy.await.unwrap();
    assert_eq!((first.status, first.text()), (200, "slept".to_string()));
    // Free again once the first request is answered.
    assert_eq!(
        send(&c, "POST", &gw.url("/fn/sleep_ms"), &[], "1")
            .await
            .status,
        200
    );
    let scrape = admin(&c, &gw, "GET", "/metrics", None, "").await.text();
    assert_eq!(
        metric(&scrape, r#"wasmgate_route_rejected_total{route="slow"}"#),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_buffering_past_the_limit_gets_413_and_streaming_passes() {
    let (_backend, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
admin: "{admin}"
limits: {max_body_bytes: 100000}
plugins:
  - {name: body, wasm: "{wasm:http_body}"}
  - {name: tag, wasm: "{wasm:add_header}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - {name: buffered, path: {prefix: /buffered}, plugins: [{plugin: body}], upstream: backend}
  - {name: streamed, path: {prefix: /streamed}, plugins: [{plugin: tag}], upstream: backend}
"#,
    )
    .await;
    let c = client();
    let big = "x".repeat(300_000);
    let r = send(&c, "POST", &gw.url("/buffered"), &[], big.clone()).await;
    assert_eq!(r.status, 413, "{}", r.text());
    let r = send(&c, "POST", &gw.url("/buffered"), &[], "small").await;
    assert_eq!(r.status, 200);
    // A filter that does not hold the body back is not limited by it.
    let r = send(&c, "POST", &gw.url("/streamed"), &[], big.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["body"].as_str().unwrap().len(), 300_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_profile_names_the_plugins_hot_functions() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: faults, wasm: "{wasm:faults}"}
routes:
  - {name: fn, path: {prefix: /fn/}, function: {plugin: faults}}
"#,
    );
    let c = client();
    let load = {
        let (c, url) = (c.clone(), gw.url("/fn/sleep_ms"));
        tokio::spawn(async move {
            for _ in 0..4 {
                send(&c, "POST", &url, &[], "300").await;
            }
        })
    };
    let folded = admin(
        &c,
        &gw,
        "POST",
        "/profile?seconds=1&plugin=faults&format=folded",
        None,
        "",
    )
    .await;
    load.await.unwrap();
    assert_eq!(folded.status, 200, "{}", folded.text());
    let text = folded.text();
    let samples: u64 = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    // faults.wasm carries full DWARF, so each sample (a symbolized stack)
    // costs milliseconds and the profiler spaces them to stay under ~10 %
    // of guest time: some tens per second of busy guest.
    assert!(samples >= 10, "{samples} samples:\n{text}");
    assert!(text.lines().all(|l| l.starts_with("faults;")), "{text}");
    assert!(text.contains("sleep_ms"), "{text}");

    // SVG, with the plugin filter refusing an unknown plugin.
    let svg_load = {
        let (c, url) = (c.clone(), gw.url("/fn/sleep_ms"));
        tokio::spawn(async move { send(&c, "POST", &url, &[], "1500").await })
    };
    let svg = admin(&c, &gw, "POST", "/profile?seconds=1", None, "").await;
    svg_load.await.unwrap();
    assert_eq!(svg.status, 200);
    assert_eq!(svg.headers["content-type"], "image/svg+xml");
    assert!(svg.text().contains("<svg") && svg.text().contains("sleep_ms"));
    let none = admin(&c, &gw, "POST", "/profile?seconds=1&plugin=nope", None, "").await;
    assert_eq!(none.status, 404);
}
