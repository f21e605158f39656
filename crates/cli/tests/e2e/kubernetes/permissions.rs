//! What a node may do: serving and writing status with the documented RBAC
//! only, and a namespace getting only what the node's file grants it.

use crate::common::client;
use crate::common::kube::{
    create, create_from_file, interface_ip, listener_condition, plugin_grant, route,
    route_condition, secure_gateway, service, tls_secret, until, until_status, Cluster,
};
use crate::common::upstream::Upstream;
use gateway_api::httproutes::HttpRoute;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::json;
use wasmgate_kubernetes::WasmPlugin;
use wasmgate_testkit::RedisServer;

/// The documented install: deploy/kubernetes/*.yaml are accepted by the API
/// server as they are, the node file in the Deployment's Secret passes
/// `wasmgate check`, and a node with exactly rbac.yaml's rights (a token of
/// its ServiceAccount) serves routes, writes their status and holds its
/// Lease, and may change nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_documented_rbac_serves_and_writes_status() {
    use crate::common::tls::curl;
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::api::PostParams;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    create_from_file(&k, "deploy/kubernetes/rbac.yaml").await;
    create_from_file(&k, "deploy/kubernetes/deployment.yaml").await;
    let secrets: Api<Secret> = Api::namespaced(k.clone(), "wasmgate-system");
    let data = secrets.get("wasmgate").await.unwrap().data.unwrap();
    let node_file = cluster.dir.path().join("from-secret.yaml");
    std::fs::write(&node_file, &data["wasmgate.yaml"].0).unwrap();
    // As the pod runs it: no admin token anywhere, the admin API on the
    // pod's loopback, the probes on a listener of their own.
    assert!(!data.contains_key("admin-token"));
    let check = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&node_file)
        .env_remove("WASMGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let node: serde_json::Value = serde_yaml_ng::from_slice(&data["wasmgate.yaml"].0).unwrap();
    let admin_address: std::net::SocketAddr = node["admin"].as_str().unwrap().parse().unwrap();
    assert!(admin_address.ip().is_loopback(), "{node}");
    {
        use k8s_openapi::api::apps::v1::Deployment;
        let deployments: Api<Deployment> = Api::namespaced(k.clone(), "wasmgate-system");
        let pod = deployments
            .get("wasmgate")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let context = pod.security_context.unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        let container = &pod.containers[0];
        let own = container.security_context.clone().unwrap();
        assert_eq!(own.read_only_root_filesystem, Some(true));
        assert_eq!(own.allow_privilege_escalation, Some(false));
        let probe = container.readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        let ports: Vec<i32> = container
            .ports
            .clone()
            .unwrap()
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert!(
            !ports.contains(&admin_address.port().into()),
            "the admin port is not the pod's: {ports:?}"
        );
    }

    let accounts: Api<ServiceAccount> = Api::namespaced(k.clone(), "wasmgate-system");
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request("wasmgate", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = cluster
        .api
        .kubeconfig_as(cluster.dir.path(), "wasmgate-sa", &token);
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    create::<HttpRoute>(&k, route("app", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/app"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    // Secrets are read by name: the Role grants `example-tls`, not
    // `other-tls`, though an HTTPS listener names each.
    let ca = Pki::new("rbac-ca");
    for (name, host) in [
        ("example-tls", "shop.example.com"),
        ("other-tls", "api.example.com"),
    ] {
        let issued = ca.server(&[host], KeyType::EcdsaP256, 1, 1);
        create::<Secret>(&k, tls_secret(name, &issued)).await;
    }
    secure_gateway(&k, "example-tls", "other-tls").await;
    let tls_port = crate::common::free_port();
    let gw = cluster.node_as(
        &kubeconfig,
        ", lease_namespace: wasmgate-system",
        &format!("listeners: [{{address: \"127.0.0.1:{tls_port}\", tls: {{}}}}]\n"),
    );
    let c = client();
    until_status(&c, &gw, "/app", 200).await;
    until("the granted Secret serves", || async {
        curl("shop.example.com", tls_port, "/", &ca.ca, &[]).status == 200
    })
    .await;
    until("the Secret the node may not read is said", || async {
        let condition = listener_condition(&k, "secure", "api", "ResolvedRefs").await;
        condition.is_some_and(|c| {
            c["status"] == "False"
                && c["message"].as_str().unwrap_or_default().contains(
                    "Secret `default/other-tls` cannot be read: the node may not read it (RBAC",
                )
        })
    })
    .await;
    let status = crate::common::gateway::admin(&c, &gw, "GET", "/status", "")
        .await
        .json();
    let unreadable = &status["config"]["kubernetes"]["secrets"]["unreadable"];
    assert!(unreadable.get("default/other-tls").is_some(), "{status}");
    assert!(unreadable.get("default/example-tls").is_none(), "{status}");
    assert_eq!(
        route_condition(&k, "app", "Accepted").await["status"],
        "True"
    );
    let leases: Api<Lease> = Api::namespaced(k.clone(), "wasmgate-system");
    let lease = leases
        .get("wasmgate-wasmgate-io-gateway-controller")
        .await
        .unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(!holder.is_empty(), "the node holds the Lease");
    let logs = gw.logs();
    let refused: Vec<&str> = (logs.lines())
        .filter(|l| l.contains("forbidden") && !l.contains("other-tls"))
        .collect();
    assert!(
        refused.is_empty(),
        "the node was refused something: {refused:?}"
    );
    // The ServiceAccount reads and writes status; it changes no spec; it
    // reads the Secret it was granted and no other, nor lists any.
    let as_node = crate::common::kube::client_from(&kubeconfig).await;
    let node_secrets: Api<Secret> = Api::default_namespaced(as_node.clone());
    assert!(node_secrets.get("example-tls").await.is_ok());
    assert!(node_secrets.get("other-tls").await.is_err());
    assert!(node_secrets.list(&Default::default()).await.is_err());
    let everywhere: Api<Secret> = Api::all(as_node.clone());
    assert!(everywhere.list(&Default::default()).await.is_err());
    let routes: Api<HttpRoute> = Api::default_namespaced(as_node);
    let refused = routes.delete("app", &DeleteParams::default()).await;
    assert!(
        refused.is_err(),
        "the node's ServiceAccount may delete routes"
    );
}

/// Tenants: each namespace's WasmPlugins use only the services and module
/// directories the node's file grants that namespace, and the node's
/// default registry credentials reach only the registries they name: a
/// WasmPlugin naming a registry of its own gets none (the registry records
/// every request's headers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_gets_only_what_the_node_file_grants_it() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let namespaces: Api<Namespace> = Api::all(k.clone());
    for name in ["team-a", "team-b"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let pki = Pki::new("wasmgate test CA");
    let cert = pki.server(&["IP:127.0.0.1"], KeyType::EcdsaP256, 1, 1);
    let recorder = Upstream::start_tls("recorder", &cert.cert, &cert.key, None).await;
    let redis = RedisServer::start();
    let source = format!(
        r#", grants: {{"team-a": {a}, "team-b": {b}}}, registry: {{hosts: ["registry.internal:5000"], username: node, password: node-secret, ca_file: "{ca}"}}"#,
        a = plugin_grant(&["redis"]),
        b = plugin_grant(&[]),
        ca = pki.ca.display(),
    );
    let services = format!(
        "services:\n  - {{name: redis, redis: \"{}\"}}\n",
        redis.url()
    );
    let gw = cluster.node_as(&cluster.dir.path().join("kubeconfig"), &source, &services);
    let module = format!(
        "file://{}",
        crate::common::plugin("higress_rules_counter").display()
    );
    let plugin = |namespace: &str, name: &str, spec: serde_json::Value| {
        let k = k.clone();
        let (namespace, name) = (namespace.to_string(), name.to_string());
        async move {
            let api: Api<WasmPlugin> = Api::namespaced(k, &namespace);
            let object: WasmPlugin = serde_json::from_value(json!({
                "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec
            }))
            .unwrap();
            api.create(&PostParams::default(), &object).await.unwrap();
        }
    };
    plugin(
        "team-a",
        "cache",
        json!({"url": module, "services": ["redis"]}),
    )
    .await;
    plugin(
        "team-b",
        "cache",
        json!({"url": module, "services": ["redis"]}),
    )
    .await;
    plugin(
        "team-b",
        "reader",
        json!({"url": "file:///etc/wasmgate/other-tenant.wasm"}),
    )
    .await;
    plugin(
        "team-b",
        "pulled",
        json!({"url": format!("oci://127.0.0.1:{}/team-b/plugin:1", recorder.port)}),
    )
    .await;
    let condition = |namespace: &'static str, name: &'static str| {
        let k = k.clone();
        async move {
            let api: Api<WasmPlugin> = Api::namespaced(k, namespace);
            let p = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
            p["status"]["conditions"][0].clone()
        }
    };
    until("team-a's plugin is accepted", || async {
        condition("team-a", "cache").await["status"] == "True"
    })
    .await;
    until("team-b's are refused with the reason", || async {
        let cache = condition("team-b", "cache").await;
        let reader = condition("team-b", "reader").await;
        cache["status"] == "False"
            && cache["message"]
                .as_str()
                .is_some_and(|m| m.contains("service `redis` is not granted to namespace `team-b`"))
            && reader["status"] == "False"
            && reader["message"]
                .as_str()
                .is_some_and(|m| m.contains("not under a granted directory"))
    })
    .await;
    // The pull went to the tenant's registry, and no credentials with it.
    until("the tenant's registry was asked", || async {
        recorder.hits() > 0
    })
    .await;
    for (path, headers) in recorder.received_all() {
        assert!(
            headers.get("authorization").is_none(),
            "{path}: {headers:?}"
        );
    }
    assert!(!gw.logs().contains("node-secret"));
}
