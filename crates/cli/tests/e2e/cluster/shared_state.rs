//! What the nodes share besides their configuration: a rate limit kept in
//! Redis, and a TLS certificate written through one node.

use super::{node_granting, push, until_serves, BASE};
use crate::common::gateway::{send, GatewayProc};
use crate::common::tls::{certificate, curl};
use crate::common::{client, HttpClient};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use wasmgate_testkit::pki::{KeyType, Pki};
use wasmgate_testkit::{EtcdServer, RedisServer};

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
