//! Filters built on Higress's Go framework (plugins/higress/, built from
//! source) through `wasmgate run`, against a real redis-server: Higress's
//! Redis ABI (`proxy_redis_init` / `proxy_redis_call` /
//! `proxy_on_redis_call_response`), its `_rules_` per route, domain and
//! service, the grant, and what the filters see when Redis is down.

use crate::common::gateway::{send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient, Reply};
use wasmgate_testkit::RedisServer;

async fn get(c: &HttpClient, gw: &GatewayProc, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(c, "GET", &gw.url(path), headers, "").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higress_filter_counts_in_redis_through_the_host() {
    let mut redis = RedisServer::start();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
services:
  - {{name: redis, redis: "{}"}}
plugins:
  - {{name: counter, wasm: "{{wasm:higress_redis_counter}}", services: [redis]}}
  - {{name: ungranted, wasm: "{{wasm:higress_redis_counter}}"}}
routes:
  - name: counted
    path: {{prefix: /counted}}
    plugins: [{{plugin: counter, conf: {{redis: {{service_name: redis.static, service_port: 6379}}, key_prefix: "hits:"}}}}]
    respond: {{status: 200, body: ok}}
  - name: by-header
    path: {{prefix: /user}}
    plugins: [{{plugin: counter, conf: {{redis: {{service_name: redis, timeout: 500}}, key_prefix: "user:", key_header: x-user}}}}]
    respond: {{status: 200, body: ok}}
  - name: not-granted
    path: {{prefix: /ungranted}}
    plugins: [{{plugin: ungranted, conf: {{redis: {{service_name: redis.static}}}}}}]
    respond: {{status: 200, body: ok}}
"#,
        redis.url()
    ));
    let c = client();
    for expected in 1..=3 {
        let r = get(&c, &gw, "/counted", &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("x-redis-count"),
            Some(expected.to_string().as_str())
        );
    }
    // The filter's key is in the real Redis.
    let key = format!("hits:127.0.0.1:{}", gw.port);
    assert_eq!(
        redis.command(&["GET", &key]),
        wasmgate_testkit::RedisReply::Bulk(b"3".to_vec())
    );
    for (user, expected) in [("ada", "1"), ("bob", "1"), ("ada", "2")] {
        let r = get(&c, &gw, "/user", &[("x-user", user)]).await;
        assert_eq!(r.header("x-redis-count"), Some(expected), "{user}");
    }
    // A filter without the grant cannot reach the service: proxy_redis_call
    // answers BadArgument, the framework reports it, the request goes on.
    let r = get(&c, &gw, "/ungranted", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-redis-count").is_none());
    let error = r.header("x-redis-error").unwrap();
    assert!(error.contains("bad argument"), "{error}");

    // Redis down: the filter gets status 1 (no reply) and fails open, at once.
    redis.stop();
    let started = std::time::Instant::now();
    let r = get(&c, &gw, "/counted", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-redis-error"),
        Some("cannot connect to redis cluster")
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // Back: counting resumes by itself (a restarted Redis starts empty).
    redis.start_again();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = get(&c, &gw, "/counted", &[]).await;
        if r.header("x-redis-count").is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no recovery: {:?}",
            r.headers
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let metrics = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    let unavailable: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"wasmgate_service_errors_total{service="redis",kind="redis",error="unavailable"} "#)
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(unavailable >= 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_rules_apply_per_route_domain_and_service() {
    let redis = RedisServer::start();
    let backend = Upstream::start("backend").await;
    let conf = r#"{"redis": {"service_name": "redis.dns"}, "tag": "global", "key_prefix": "g:",
      "_rules_": [
        {"_match_route_": ["orders"], "tag": "orders-route", "key_prefix": "o:"},
        {"_match_domain_": ["*.example.com"], "tag": "example-domain", "key_prefix": "d:"},
        {"_match_service_": ["backend"], "tag": "backend-service", "key_prefix": "s:"}
      ]}"#;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
services:
  - {{name: redis, redis: "{}"}}
plugins:
  - {{name: rules, wasm: "{{wasm:higress_rules_counter}}", services: [redis]}}
upstreams:
  - {{name: backend, nodes: [{{address: "{}"}}]}}
global_plugins:
  - {{plugin: rules, conf: {conf}}}
routes:
  - {{name: orders, path: {{prefix: /orders}}, respond: {{status: 200, body: ok}}}}
  - {{name: proxied, path: {{prefix: /proxied}}, upstream: backend}}
  - {{name: other, respond: {{status: 200, body: ok}}}}
"#,
        redis.url(),
        backend.address()
    ));
    let c = client();
    let tag = |r: &Reply| r.header("x-rule-tag").unwrap_or_default().to_string();
    let r = get(&c, &gw, "/orders/1", &[]).await;
    assert_eq!(tag(&r), "orders-route");
    assert_eq!(r.header("x-rule-count"), Some("1"));
    let r = get(&c, &gw, "/anything", &[("host", "shop.example.com")]).await;
    assert_eq!(tag(&r), "example-domain");
    let r = get(&c, &gw, "/proxied", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(tag(&r), "backend-service");
    let r = get(&c, &gw, "/anything", &[]).await;
    assert_eq!(tag(&r), "global");
    let r = get(&c, &gw, "/orders/2", &[]).await;
    assert_eq!(r.header("x-rule-count"), Some("2"));
    assert_eq!(
        redis.command(&["GET", &format!("o:127.0.0.1:{}", gw.port)]),
        wasmgate_testkit::RedisReply::Bulk(b"2".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higress_rate_limit_answers_429_past_its_limit() {
    let redis = RedisServer::start();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
services:
  - {{name: redis, redis: "{}"}}
plugins:
  - {{name: limit, wasm: "{{wasm:higress_rate_limit}}", services: [redis]}}
routes:
  - name: limited
    plugins: [{{plugin: limit, conf: {{redis: {{service_name: redis.static}}, limit: 3, window_seconds: 60, key_header: x-api-key}}}}]
    respond: {{status: 200, body: ok}}
"#,
        redis.url()
    ));
    let c = client();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = get(&c, &gw, "/", &[("x-api-key", "k1")]).await;
        statuses.push(r.status);
        if r.status == 200 {
            assert!(r.header("x-ratelimit-remaining").is_some());
        } else {
            assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    // Another key has its own window.
    assert_eq!(get(&c, &gw, "/", &[("x-api-key", "k2")]).await.status, 200);
}

/// Higress's framework asks its host to replace a VM (`wasm_need_rebuild`)
/// after so many requests or so much memory (`plugin_vm_memory`), as Go's
/// heap in Wasm never shrinks; the host replaces the instance once that
/// request is over, and the next request meets a fresh VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higress_filter_that_asks_for_a_rebuild_gets_a_fresh_vm() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: rebuild, wasm: "{wasm:higress_rebuild}"}
routes:
  - {name: r, plugins: [{plugin: rebuild}], respond: {status: 200, body: ok}}
"#,
    );
    let c = client();
    let mut counts = Vec::new();
    for _ in 0..7 {
        let reply = get(&c, &gw, "/", &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        counts.push(reply.header("x-vm-requests").unwrap().to_string());
        let memory: u64 = reply.header("x-vm-memory").unwrap().parse().unwrap();
        assert!(memory >= 1 << 20, "plugin_vm_memory {memory}");
    }
    // The framework asks on every third request; each ask replaces the VM.
    assert_eq!(counts, ["1", "2", "3", "1", "2", "3", "1"]);
    let restarts = r#"wasmgate_plugin_restarts_total{plugin="rebuild",route="r"}"#;
    assert_eq!(crate::common::gateway::metric(&c, &gw, restarts).await, 2.0);
}
