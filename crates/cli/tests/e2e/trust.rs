//! The trust boundaries of docs/admin.md's threat model, over real HTTP:
//! native code (precompiled modules) only from the operator's own file; a
//! rejected reload changes nothing, services and their pools included; a
//! plugin's metrics cannot pose as the gateway's or break the scrape (read
//! by Prometheus's own `promtool`); names follow one rule everywhere; crash
//! reports stay with the operator unless asked for.

use crate::common::gateway::{admin, get, send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, plugin, wasmgate};
use wasmgate_testkit::RedisServer;

/// `wasmgate compile` of a bundled plugin into `dir`.
fn precompile(name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let cwasm = dir.join(format!("{name}.cwasm"));
    let out = wasmgate()
        .args(["compile", plugin(name).to_str().unwrap(), "-o"])
        .arg(&cwasm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cwasm
}

fn check(yaml: &str, dir: &std::path::Path) -> (bool, String) {
    let file = dir.join("check.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = wasmgate()
        .args(["check", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precompiled_modules_load_only_from_the_operators_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = precompile("add_header", dir.path());
    let cwasm = cwasm.display().to_string();
    let plugins = format!(
        "plugins: [{{name: tag, wasm: \"{cwasm}\"}}]\nroutes: [{{name: r, plugins: [{{plugin: tag}}], respond: {{body: ok}}}}]\n"
    );
    // Refused unless the file says so.
    let (ok, text) = check(&plugins, dir.path());
    assert!(!ok, "{text}");
    assert!(
        text.contains("precompiled module") && text.contains("allow_precompiled"),
        "{text}"
    );
    let (ok, text) = check(&format!("allow_precompiled: true\n{plugins}"), dir.path());
    assert!(ok, "{text}");
    // A URL in the operator's own file is not the operator's file.
    let files = Upstream::start("files").await;
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&cwasm).unwrap()))
    };
    let url = format!("http://{}/file{cwasm}", files.address());
    let fetched = format!(
        "allow_precompiled: true\nplugins: [{{name: tag, wasm: \"{url}\", sha256: \"{sha}\"}}]\nroutes: [{{name: r, plugins: [{{plugin: tag}}], respond: {{body: ok}}}}]\n"
    );
    // The check fetches from this test's own server: block this worker only.
    let (ok, text) = tokio::task::block_in_place(|| check(&fetched, dir.path()));
    assert!(!ok && text.contains("precompiled module"), "{text}");

    // Served from the operator's file; never from the admin API or a URL.
    let gw = GatewayProc::start(&format!(
        "listen: \"{{listen}}\"\nadmin: \"{{admin}}\"\nadmin_writes: true\nallow_precompiled: true\n{plugins}"
    ));
    let c = client();
    assert_eq!(get(&c, &gw.url("/r")).await.status, 200);
    for (name, entry) in [
        ("evil", format!(r#"{{"wasm": "{cwasm}"}}"#)),
        // The operator's own plugin, re-put through the API: now the API's.
        ("tag", format!(r#"{{"wasm": "{cwasm}"}}"#)),
        (
            "fetched",
            format!(r#"{{"wasm": "{url}", "sha256": "{sha}"}}"#),
        ),
    ] {
        let put = admin(&c, &gw, "PUT", &format!("/plugins/{name}"), &entry).await;
        assert_eq!(put.status, 422, "{name}: {}", put.text());
        assert!(
            put.text().contains("precompiled module"),
            "{name}: {}",
            put.text()
        );
    }
    assert_eq!(get(&c, &gw.url("/r")).await.status, 200);
    let status = admin(&c, &gw, "GET", "/status", "").await.json();
    assert_eq!(status["reload"]["generation"], 1, "{status}");
}

/// A reload that fails changes nothing: the services of the rejected
/// configuration do not appear, and the running service keeps its pool
/// (the same connection to Redis) and its counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_reload_leaves_services_pools_and_metrics_untouched() {
    let redis = RedisServer::start();
    let config = |services: &str, wasm: &str| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
services:
{services}
plugins:
  - {{name: counter, wasm: "{wasm}", services: [cache]}}
routes:
  - name: counted
    plugins: [{{plugin: counter, conf: {{redis: {{service_name: cache}}, key_prefix: "hits:"}}}}]
    respond: {{status: 200, body: ok}}
"#
        )
    };
    let cache = format!(
        "  - {{name: cache, redis: \"{}\", pool_size: 1}}",
        redis.url()
    );
    let gw = GatewayProc::start(&config(&cache, "{wasm:higress_redis_counter}"));
    let c = client();
    for n in 1..=3 {
        let reply = get(&c, &gw.url("/")).await;
        assert_eq!(
            reply.headers["x-redis-count"],
            n.to_string(),
            "{}",
            reply.text()
        );
    }
    let connections = redis.client_ids();
    let before = admin(&c, &gw, "GET", "/metrics", "").await.text();
    let calls = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(r#"wasmgate_service_calls_total{service="cache""#))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{text}"))
    };
    // The service changed and a new one added, but a plugin does not load.
    let changed = format!(
        "  - {{name: cache, redis: \"{}\", pool_size: 2}}\n  - {{name: other, redis: \"{}\"}}",
        redis.url(),
        redis.url()
    );
    gw.rewrite(&config(&changed, "/nowhere/missing.wasm"));
    let reload = admin(&c, &gw, "POST", "/reload", "").await;
    assert_eq!(reload.status, 422, "{}", reload.text());
    let after = admin(&c, &gw, "GET", "/metrics", "").await.text();
    assert!(!after.contains(r#"service="other""#), "{after}");
    assert_eq!(calls(&after), calls(&before));
    // The same service serves on: its counters go on from where they
    // were, on the same connection.
    let reply = get(&c, &gw.url("/")).await;
    assert_eq!(reply.headers["x-redis-count"], "4");
    assert_eq!(redis.client_ids(), connections);
    let served = admin(&c, &gw, "GET", "/metrics", "").await.text();
    assert!(
        served.contains(r#"wasmgate_service_calls_total{service="cache",kind="redis"} 4"#),
        "{served}"
    );
    // The next good reload (a new service beside the unchanged one) keeps
    // the unchanged service's pool: the rejected one left nothing to undo.
    let added = format!("{cache}\n  - {{name: other, redis: \"{}\"}}", redis.url());
    gw.rewrite(&config(&added, "{wasm:higress_redis_counter}"));
    let reload = admin(&c, &gw, "POST", "/reload", "").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let reply = get(&c, &gw.url("/")).await;
    assert_eq!(reply.headers["x-redis-count"], "5");
    // The same connection as before: the pool was not rebuilt.
    let now = redis.client_ids();
    assert!(
        connections.iter().all(|id| now.contains(id)),
        "{connections:?} -> {now:?}"
    );
    let served = admin(&c, &gw, "GET", "/metrics", "").await.text();
    assert!(
        served.contains(r#"wasmgate_service_calls_total{service="cache",kind="redis"} 5"#),
        "{served}"
    );
    assert!(served.contains(r#"service="other""#), "{served}");
}

/// `promtool check metrics`: lint findings are printed; a scrape that does
/// not parse fails.
fn promtool_check(scrape: &str) -> Result<(), String> {
    let (passed, text) = crate::common::promtool(scrape);
    if text.contains("error while linting") || (!passed && text.contains("parse")) {
        Err(text)
    } else {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_cannot_forge_or_break_the_gateways_metrics() {
    let hostile = serde_json::json!([
        {"type": "counter", "name": "wasmgate_route_requests_total", "value": 999999},
        {"type": "gauge", "name": "a.b", "value": 1},
        {"type": "gauge", "name": "a_b", "value": 2},
        {"type": "histogram", "name": "a_b", "value": 3},
        {"type": "histogram", "name": "x", "value": 4},
        {"type": "gauge", "name": "x_sum", "value": 5},
        {"type": "gauge", "name": "quote\"new\nline{x=\"1\"} 5", "value": 6},
        {"type": "counter", "name": "9lives", "value": 7},
        {"type": "counter", "name": "", "value": 8},
    ]);
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: names, wasm: "{{wasm:metric_names}}"}}
  - {{name: other, wasm: "{{wasm:metrics}}"}}
routes:
  - {{name: hostile, path: {{prefix: /hostile}}, plugins: [{{plugin: names, conf: '{hostile}'}}], respond: {{body: x}}}}
  - {{name: counted, path: {{prefix: /counted}}, plugins: [{{plugin: other}}], respond: {{body: y}}}}
"#
    ));
    let c = client();
    for _ in 0..2 {
        assert_eq!(get(&c, &gw.url("/counted")).await.status, 200);
    }
    let reply = get(&c, &gw.url("/hostile")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // Another plugin's metrics are not found from this one.
    assert_eq!(reply.headers["x-foreign-metrics"], "0");
    let scrape = admin(&c, &gw, "GET", "/metrics", "").await.text();
    promtool_check(&scrape).unwrap_or_else(|e| panic!("{e}\n{scrape}"));
    let types: Vec<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .collect();
    let mut families: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    let count = families.len();
    families.sort();
    families.dedup();
    assert_eq!(families.len(), count, "a family declared twice: {types:?}");
    // Ours count what we count; the plugin's are under its own prefix.
    assert!(
        scrape.contains(r#"wasmgate_route_requests_total{route="counted",class="2xx"} 2"#),
        "{scrape}"
    );
    assert!(!scrape.contains("999999\n") || scrape.contains(
        r#"wasmcustom_wasmgate_route_requests_total{plugin="names",name="wasmgate_route_requests_total"} 999999"#
    ), "{scrape}");
    for line in scrape.lines().filter(|l| l.starts_with("wasmgate_")) {
        assert!(!line.contains("999999"), "{line}");
    }
    // Names that collapse stay apart, by the name the plugin gave; a family
    // that would clash with another's samples takes its type in its name.
    for series in [
        r#"wasmcustom_a_b{plugin="names",name="a.b"} 1"#,
        r#"wasmcustom_a_b{plugin="names",name="a_b"} 2"#,
        r#"wasmcustom_a_b_summary_sum{plugin="names",name="a_b"} 3"#,
        r#"wasmcustom_x_sum{plugin="names",name="x"} 4"#,
        r#"wasmcustom_x_sum_gauge{plugin="names",name="x_sum"} 5"#,
    ] {
        assert!(scrape.contains(series), "{series} in {scrape}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_follow_one_rule_and_paths_are_decoded() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
admin_writes: true
routes:
  - {name: home, respond: {body: home}}
"#,
    );
    let c = client();
    for name in ["auth%20v2", "%22%3E%3Cscript%3E", "__proto__", "a%2Fb"] {
        let put = admin(
            &c,
            &gw,
            "PUT",
            &format!("/routes/{name}"),
            r#"{"respond": {}}"#,
        )
        .await;
        assert_eq!(put.status, 422, "{name}: {}", put.text());
        assert!(
            put.text().contains("not a valid name"),
            "{name}: {}",
            put.text()
        );
        // The caller's mistake, said as theirs: not the operator's file's,
        // and no reload failed.
        assert!(
            put.text().contains("admin API: PUT route"),
            "{}",
            put.text()
        );
        assert!(!put.text().contains("wasmgate.yaml"), "{}", put.text());
    }
    assert_eq!(
        crate::common::gateway::metric(&c, &gw, "wasmgate_config_reload_failures_total").await,
        0.0
    );
    // An encoded name that is valid reaches its entry.
    let put = admin(
        &c,
        &gw,
        "PUT",
        "/routes/constructor",
        r#"{"path": {"prefix": "/c"}, "respond": {"body": "c"}}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    let found = admin(&c, &gw, "GET", "/routes/%63onstructor", "").await;
    assert_eq!(found.status, 200, "{}", found.text());
    assert_eq!(found.json()["name"], "constructor");
    let deleted = admin(&c, &gw, "DELETE", "/routes/%63onstructor", "").await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    // `check` applies the same rule to the file.
    let dir = tempfile::tempdir().unwrap();
    let (ok, text) = check("routes: [{name: 'auth v2', respond: {}}]\n", dir.path());
    assert!(
        !ok && text.contains("routes[0].name") && text.contains("not a valid name"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_reports_stay_in_the_log_unless_the_operator_asks() {
    for details in [false, true] {
        let gw = GatewayProc::start(&format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
error_details: {details}
plugins:
  - {{name: faults, wasm: "{{wasm:faults}}"}}
routes:
  - {{name: f, path: {{prefix: /f/}}, function: {{plugin: faults}}}}
"#
        ));
        let c = client();
        let trap = send(&c, "POST", &gw.url("/f/trap"), &[], "x").await;
        assert_eq!(trap.status, 500);
        let error = &trap.json()["error"];
        assert_eq!(error["kind"], "trap");
        // Which plugin failed is the operator's to know (docs/security.md),
        // in the answer only with error_details.
        assert_eq!(error["plugin"] == "faults", details, "{error}");
        let id = error["request_id"].as_u64().expect("a request id");
        let found = admin(&c, &gw, "GET", &format!("/errors/{id}"), "")
            .await
            .json();
        assert_eq!(found["error"]["plugin"], "faults", "{found}");
        let text = trap.text();
        assert_eq!(text.contains("explode_on_purpose"), details, "{text}");
        assert_eq!(text.contains(".rs"), details, "{text}");
        assert_eq!(error["backtrace"].is_array(), details, "{text}");
        // The report is the operator's, under that id: in the plugin's
        // status and in the log.
        let status = admin(&c, &gw, "GET", "/plugins/faults/status", "")
            .await
            .json();
        let crash = &status["instance_sets"][0]["last_crash"]["report"];
        assert_eq!(crash["request_id"].as_u64(), Some(id), "{status}");
        assert!(crash.to_string().contains("explode_on_purpose"), "{status}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !gw.logs().contains(&format!("request {id})")) {
            assert!(std::time::Instant::now() < deadline, "{}", gw.logs());
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The same for a Proxy-Wasm filter that traps: the client learns which
/// callback of which plugin failed and the request id, and the backtrace
/// (the filter's function names) only when the operator asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filters_crash_report_stays_in_the_log_unless_the_operator_asks() {
    let dir = tempfile::tempdir().unwrap();
    let fragile = dir.path().join("fragile.wat");
    std::fs::write(&fragile, crate::common::gateway::FRAGILE).unwrap();
    for details in [false, true] {
        let gw = GatewayProc::start(&format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
error_details: {details}
plugins:
  - {{name: fragile, wasm: "{}"}}
routes:
  - {{name: r, plugins: [{{plugin: fragile}}], respond: {{body: ok}}}}
"#,
            fragile.display()
        ));
        let c = client();
        let crash = get(&c, &gw.url("/crash")).await;
        assert_eq!(crash.status, 500, "{}", crash.text());
        let error = &crash.json()["error"];
        assert_eq!(error["kind"], "filter_failed");
        let id = error["request_id"].as_u64().expect("a request id");
        // The client gets the plugin and the callback only with
        // error_details; the operator finds them under the id either way.
        assert_eq!(error["plugin"] == "fragile", details, "{error}");
        let found = admin(&c, &gw, "GET", &format!("/errors/{id}"), "")
            .await
            .json();
        assert_eq!(found["error"]["plugin"], "fragile", "{found}");
        let message = found["error"]["message"].as_str().unwrap();
        assert!(message.contains("proxy_on_request_headers"), "{message}");
        let answered = crash.text();
        assert_eq!(
            answered.contains("proxy_on_request_headers"),
            details,
            "{answered}"
        );
        assert_eq!(
            answered.contains("explode_on_purpose"),
            details,
            "{answered}"
        );
        let status = admin(&c, &gw, "GET", "/plugins/fragile/status", "")
            .await
            .json();
        let report = &status["instance_sets"][0]["last_crash"]["report"];
        assert_eq!(report["request_id"].as_u64(), Some(id), "{status}");
        assert!(
            report.to_string().contains("explode_on_purpose"),
            "{status}"
        );
    }
}
