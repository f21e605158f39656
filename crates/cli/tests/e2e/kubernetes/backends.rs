//! Backends: Services reached over TLS by BackendTLSPolicy, and services
//! (Redis, ...) described in a ConfigMap with their passwords in Secrets.

use super::get_host;
use crate::common::client;
use crate::common::kube::{create, interface_ip, route, service, until, until_status, Cluster};
use crate::common::upstream::Upstream;
use gateway_api::httproutes::HttpRoute;
use kube::Api;
use serde_json::json;
use std::time::Duration;
use wasmgate_kubernetes::WasmPlugin;
use wasmgate_testkit::RedisServer;

/// A BackendTLSPolicy makes the node speak TLS to a Service's endpoints,
/// verified with the CA of a ConfigMap for the policy's `hostname`; a
/// second policy on the same Service is `Conflicted`; a policy whose CA
/// ConfigMap is missing fails its route with 500 (never plain text) and
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_reach_services_over_tls() {
    use gateway_api::backendtlspolicies::BackendTlsPolicy;
    use k8s_openapi::api::core::v1::ConfigMap;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let pki = Pki::new("backend CA");
    let issued = pki.server(&["app.internal"], KeyType::EcdsaP256, 3, 1);
    let secure = Upstream::start_tls_on("secure", &ip, &issued.cert, &issued.key, None).await;
    let other = Upstream::start_tls_on("other", &ip, &issued.cert, &issued.key, None).await;
    service(&k, "secure", &[&secure]).await;
    service(&k, "other", &[&other]).await;
    create::<ConfigMap>(
        &k,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "backend-ca"},
               "data": {"ca.crt": std::fs::read_to_string(&pki.ca).unwrap()}}),
    )
    .await;
    let policy = |name: &str, service: &str, config_map: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
               "metadata": {"name": name},
               "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": service}],
                        "validation": {"hostname": "app.internal",
                                       "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": config_map}]}}})
    };
    create::<BackendTlsPolicy>(&k, policy("secure-tls", "secure", "backend-ca")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // a later creation time
    create::<BackendTlsPolicy>(&k, policy("secure-late", "secure", "backend-ca")).await;
    create::<BackendTlsPolicy>(&k, policy("other-tls", "other", "no-such-ca")).await;
    for name in ["secure", "other"] {
        create::<HttpRoute>(
            &k,
            route(
                name,
                json!([
                    {"matches": [{"path": {"type": "PathPrefix", "value": format!("/{name}")}}],
                     "backendRefs": [{"name": name, "port": 80}]}
                ]),
            ),
        )
        .await;
    }
    let gw = cluster.node("");
    let c = client();
    let reply = until_status(&c, &gw, "/secure/x", 200).await;
    assert_eq!(reply.json()["upstream"], "secure", "{}", reply.text());
    // Why (the missing CA) is the namespace owner's, in the policy's status
    // below; the client learns only that the route cannot be served.
    let failing = until_status(&c, &gw, "/other/x", 500).await;
    assert!(
        failing.text().contains("cannot be served") && !failing.text().contains("no-such-ca"),
        "{}",
        failing.text()
    );
    assert_eq!(other.hits(), 0, "never in plain text");

    let policies: Api<BackendTlsPolicy> = Api::default_namespaced(k.clone());
    let ancestor = |name: &'static str| {
        let policies = policies.clone();
        async move {
            let p = serde_json::to_value(policies.get(name).await.unwrap()).unwrap();
            let a = p["status"]["ancestors"][0].clone();
            let reason = |kind: &str| {
                (a["conditions"].as_array().into_iter().flatten())
                    .find(|c| c["type"] == kind)
                    .map(|c| c["reason"].as_str().unwrap_or_default().to_string())
                    .unwrap_or_default()
            };
            (
                a["ancestorRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                reason("Accepted"),
                reason("ResolvedRefs"),
            )
        }
    };
    let wanted = [
        ("secure-tls", "Accepted", "ResolvedRefs"),
        ("secure-late", "Conflicted", "ResolvedRefs"),
        (
            "other-tls",
            "NoValidCACertificate",
            "InvalidCACertificateRef",
        ),
    ];
    for (name, accepted, resolved) in wanted {
        until(
            "the policy's status names the Gateway and says how it stands",
            || async {
                ancestor(name).await
                    == (
                        "edge".to_string(),
                        accepted.to_string(),
                        resolved.to_string(),
                    )
            },
        )
        .await;
    }
}

/// Services from a ConfigMap (`kubernetes.services`), each password from
/// a Secret: a WasmPlugin reaches a password-protected Redis through them,
/// and a rotated Secret reaches the node without a reload (the old
/// password refused, connections dropped: counting goes on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_come_from_a_config_map_with_passwords_from_secrets() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Patch, PatchParams};
    use wasmgate_testkit::RedisOptions;

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let mut redis = RedisServer::start_with(RedisOptions {
        password: Some("first-pass".into()),
        ..RedisOptions::default()
    });
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    create::<HttpRoute>(&k, route("counted", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/counted"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let list = format!(
        "- {{name: redis, redis: \"redis://127.0.0.1:{}/0\", password_secret: {{name: redis-auth, key: password}}}}\n",
        redis.port()
    );
    create::<ConfigMap>(
        &k,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "wasmgate-services"},
               "data": {"services.yaml": list}}),
    )
    .await;
    let secret = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-auth"},
               "type": "Opaque", "stringData": {"password": password}})
    };
    create::<Secret>(&k, secret("first-pass")).await;
    create::<WasmPlugin>(&k, json!({
        "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "rules"},
        "spec": {"url": format!("file://{}", crate::common::plugin("higress_rules_counter").display()),
                 "services": ["redis"],
                 "defaultConfig": {"redis": {"service_name": "redis.dns"}, "tag": "from-config-map"}}
    }))
    .await;
    let gw = cluster.node_as(
        &cluster.dir.path().join("kubeconfig"),
        ", services: default/wasmgate-services",
        "",
    );
    let c = client();
    let count = || async {
        let reply = get_host(&c, &gw, "/counted", "x").await;
        reply
            .header("x-rule-count")
            .unwrap_or_default()
            .parse::<u32>()
            .unwrap_or(0)
    };
    until(
        "the plugin counts in Redis with the Secret's password",
        || async { count().await >= 1 },
    )
    .await;
    assert!(
        !gw.logs().contains("first-pass"),
        "the password is never logged"
    );

    // Rotation: Redis takes only the new password and drops every
    // connection; the Secret changes; the node follows with no reload.
    redis.change_password("second-pass");
    let secrets: Api<Secret> = Api::default_namespaced(k.clone());
    secrets
        .patch(
            "redis-auth",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "second-pass"}})),
        )
        .await
        .unwrap();
    redis.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    let before = count().await;
    until("counting goes on with the rotated password", || async {
        count().await > before
    })
    .await;
    assert!(!gw.logs().contains("second-pass"), "nor the new one");
}
