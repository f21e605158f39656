//! Extism plugins that use Redis and PostgreSQL through the host
//! (`wasmgate:host/services`, docs/services.md), built from source with the
//! guest libraries of guest/ (plugins/rust/orders, plugins/go/orders), run by
//! `wasmgate serve --service` and as gateway function routes, against real
//! servers started by the test.

use crate::common::gateway::{send, GatewayProc};
use crate::common::{client, orders_db, plugin, post, Server};
use serde_json::{json, Value};
use wasmgate_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extism_plugin_queries_postgres_and_redis_through_serve() {
    let mut db = orders_db();
    let redis = RedisServer::start();
    let ca = db.ca_cert_path().unwrap();
    let orders = plugin("orders");
    let server = Server::start(&[
        orders.to_str().unwrap(),
        "list_orders",
        "--service",
        &format!("orders={}", db.url()),
        "--service",
        &format!("cache={}", redis.url()),
        "--service-ca-file",
        ca.to_str().unwrap(),
    ]);
    let c = client();
    let added = post(
        &c,
        &server.url("/add_order"),
        r#"{"customer": "c-42", "total": "12.50", "items": [{"sku": "a", "qty": 2}], "note": "first"}"#,
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.text());
    let id = added.json()["id"].as_i64().unwrap();
    post(
        &c,
        &server.url("/add_order"),
        r#"{"customer": "c-42", "total": 3}"#,
    )
    .await;
    post(
        &c,
        &server.url("/add_order"),
        r#"{"customer": "other", "total": 1}"#,
    )
    .await;

    let listed = post(&c, &server.url("/"), "c-42").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    let rows = listed.json();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["total"], "12.50");
    assert_eq!(rows[0]["items"], json!([{"sku": "a", "qty": 2}]));
    assert_eq!(rows[0]["note"], "first");
    assert_eq!(rows[1]["total"], "3.00");
    assert_eq!(rows[1]["note"], Value::Null);
    assert!(rows[0]["created_at"].as_str().unwrap().ends_with('Z'));
    // The plugin's insert went through the host, into the real table.
    assert_eq!(db.psql("select count(*) from orders").trim(), "3");

    for expected in ["1", "2"] {
        let r = post(&c, &server.url("/visits"), "home").await;
        assert_eq!(r.text(), expected);
    }

    // Typed parameters and columns, through the guest library.
    let types = post(&c, &server.url("/types"), "").await;
    assert_eq!(types.status, 200, "{}", types.text());

    // The database goes away: the plugin's call fails clearly, and the
    // server keeps serving; it comes back by itself.
    db.stop();
    let r = post(&c, &server.url("/"), "c-42").await;
    assert_eq!(r.status, 500);
    assert!(r.text().contains("unavailable"), "{}", r.text());
    assert_eq!(post(&c, &server.url("/visits"), "home").await.text(), "3");
    db.start_again();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = post(&c, &server.url("/"), "c-42").await;
        if r.status == 200 {
            assert_eq!(r.json().as_array().unwrap().len(), 2);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.text());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_grants_are_per_plugin_and_the_go_library_agrees() {
    let db = orders_db();
    // Redis's password from a file (a mounted Secret key), not the URL.
    let redis = RedisServer::start_with(wasmgate_testkit::RedisOptions {
        password: Some("cache-pw".into()),
        ..Default::default()
    });
    let secrets = tempfile::tempdir().unwrap();
    let password_file = secrets.path().join("redis-password");
    std::fs::write(&password_file, "cache-pw\n").unwrap();
    let redis_url = redis.url().replace(":cache-pw@", "@");
    assert!(!redis_url.contains("cache-pw"), "{redis_url}");
    let ca = db.ca_cert_path().unwrap();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
admin_writes: true
services:
  - {{name: orders, postgres: "{}", tls_ca_file: "{}", pool_size: 4}}
  - {{name: cache, redis: "{}", password_file: "{}"}}
plugins:
  - {{name: rust_orders, wasm: "{{wasm:orders}}", services: [orders]}}
  - {{name: go_orders, wasm: "{{wasm:go_orders}}", services: [orders, cache]}}
routes:
  - {{name: rust, path: {{prefix: /rust/}}, function: {{plugin: rust_orders}}}}
  - {{name: go, path: {{prefix: /go/}}, function: {{plugin: go_orders}}}}
"#,
        db.url(),
        ca.display(),
        redis_url,
        password_file.display()
    ));
    let c = client();
    let order = r#"{"customer": "c-1", "total": "9.99", "items": ["x"]}"#;
    assert_eq!(
        send(&c, "POST", &gw.url("/rust/add_order"), &[], order)
            .await
            .status,
        200
    );
    assert_eq!(
        send(&c, "POST", &gw.url("/go/add_order"), &[], order)
            .await
            .status,
        200
    );
    let rust = send(&c, "POST", &gw.url("/rust/list_orders"), &[], "c-1").await;
    let go = send(&c, "POST", &gw.url("/go/list_orders"), &[], "c-1").await;
    assert_eq!(rust.status, 200, "{}", rust.text());
    assert_eq!(
        rust.json(),
        go.json(),
        "the Rust and Go libraries read the same rows alike"
    );
    assert_eq!(rust.json().as_array().unwrap().len(), 2);

    // rust_orders was granted `orders` only: `cache` is refused by name.
    let probe = json!({"op": "redis", "service": "cache", "command": ["PING"]}).to_string();
    let r = send(&c, "POST", &gw.url("/rust/probe"), &[], probe).await;
    let error = &r.json()["error"];
    assert_eq!(error["kind"], "not_granted", "{}", r.text());
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("granted: orders"));
    // The Go plugin has it.
    assert_eq!(
        send(&c, "POST", &gw.url("/go/visits"), &[], "k")
            .await
            .text(),
        "1"
    );
    // Errors are answers with kinds, not traps.
    let probe =
        json!({"op": "pg_query", "service": "orders", "sql": "select * from nowhere"}).to_string();
    let r = send(&c, "POST", &gw.url("/rust/probe"), &[], probe).await;
    assert_eq!(r.json()["error"]["kind"], "query");
    assert_eq!(r.json()["error"]["code"], "42P01");
    let probe = json!({"op": "pg_query", "raw": "{not json"}).to_string();
    let r = send(&c, "POST", &gw.url("/rust/probe"), &[], probe).await;
    assert_eq!(r.json()["error"]["kind"], "bad_request");

    // A call that waits 50 ms for PostgreSQL is not a long call: waiting on
    // the network uses no CPU, so it stays on its worker instead of moving
    // to the slow lane (it would move after 1 ms if waits counted). Counted
    // around these calls only: a plugin's first calls may legitimately run
    // past 1 ms of CPU on a loaded machine (the Go runtime starting up).
    let moved = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("wasmgate_long_calls_moved_total "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{metrics}"))
    };
    let before = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    let probe =
        json!({"op": "pg_query", "service": "orders", "sql": "select pg_sleep(0.05)"}).to_string();
    for _ in 0..3 {
        let r = send(&c, "POST", &gw.url("/rust/probe"), &[], probe.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }

    // The pool is bounded and its gauges are on /metrics.
    let metrics = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    assert_eq!(moved(&metrics), moved(&before), "{metrics}");
    let calls: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"wasmgate_service_calls_total{service="orders",kind="postgres"} "#)
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(calls >= 5.0, "{calls}");
    assert!(db.app_connection_count() <= 4);
    // Service URLs are shown without their passwords.
    let services = send(&c, "GET", &gw.admin_url("/services/orders"), &[], "").await;
    assert!(!services.text().contains("app-pw"), "{}", services.text());
    assert!(services.text().contains("***"), "{}", services.text());
    // A password_file is the operator's to name: through the admin API it
    // would send a file of the node to a host the writer chose.
    let sneaky = json!({"redis": "redis://127.0.0.1:1/0", "password_file": password_file});
    let put = send(
        &c,
        "PUT",
        &gw.admin_url("/services/sneaky"),
        &[
            ("x-wasmgate-admin", "1"),
            ("content-type", "application/json"),
        ],
        sneaky.to_string(),
    )
    .await;
    assert!(put.status >= 400, "{}", put.text());
    assert!(
        put.text().contains("password_file is read only"),
        "{}",
        put.text()
    );
}

#[test]
fn check_refuses_grants_of_unknown_services_and_bad_urls() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    std::fs::write(
        &file,
        format!(
            "services:\n  - {{name: a, redis: 'http://x'}}\n  - {{name: b}}\nplugins:\n  - {{name: p, wasm: {}, services: [nope]}}\nroutes: []\n",
            plugin("orders").display()
        ),
    )
    .unwrap();
    let out = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "services[a].redis",
        "services[b]: give exactly one of `redis` or `postgres`",
        "plugins[p].services[0]: no service named `nope`",
    ] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
}
