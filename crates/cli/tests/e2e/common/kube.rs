//! A real Kubernetes API server for the tests and the benchmark that
//! follow one (kubernetes.rs, kubernetes_bench.rs): kube-apiserver with the
//! Gateway API CRDs and ours, a GatewayClass and Gateway of wasmgate's, and
//! resources created through the API as `kubectl apply` would.

use std::time::{Duration, Instant};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{json, Value};
use wasmgate_kubernetes::WasmPlugin;
use wasmgate_testkit::{gateway_api_crd, KubeApiServer};

use super::gateway::{send, GatewayProc};
use super::upstream::Upstream;
use super::{HttpClient, Reply};

/// An address of this machine that is not loopback: EndpointSlices refuse
/// 127.0.0.0/8, so the upstreams listen here. A machine with none (a bare
/// container) gets a documentation address (TEST-NET-2) on `lo`, which
/// needs root, as CI runs.
pub fn interface_ip() -> String {
    let global = || {
        let out = std::process::Command::new("ip")
            .args(["-4", "-o", "addr", "show", "scope", "global"])
            .output()
            .expect("running ip");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .and_then(|cidr| cidr.split('/').next())
            .map(str::to_string)
    };
    if let Some(ip) = global() {
        return ip;
    }
    let _ = std::process::Command::new("ip")
        .args(["addr", "add", "198.51.100.7/32", "dev", "lo"])
        .status();
    global().expect(
        "no non-loopback IPv4 address on this machine, and none could be added to lo (not root?)",
    )
}

pub async fn kube_client(api: &KubeApiServer, dir: &std::path::Path) -> Client {
    client_from(&api.kubeconfig(dir)).await
}

/// A client with `kubeconfig`'s identity.
pub async fn client_from(kubeconfig: &std::path::Path) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Installs the Gateway API CRDs the node watches and ours (WasmPlugin, as
/// docs/kubernetes.md installs it) and waits until they are served.
pub async fn install_crds(c: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let ours = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes/wasmplugin-crd.yaml"
    );
    let files = [
        "gatewayclasses",
        "gateways",
        "httproutes",
        "grpcroutes",
        "referencegrants",
        "backendtlspolicies",
    ]
    .map(gateway_api_crd)
    .into_iter()
    .chain([ours.into()]);
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text).unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let routes: Api<HttpRoute> = Api::default_namespaced(c.clone());
    let plugins: Api<WasmPlugin> = Api::default_namespaced(c.clone());
    until("the CRDs are served", || async {
        routes.list(&Default::default()).await.is_ok()
            && plugins.list(&Default::default()).await.is_ok()
    })
    .await;
}

/// An API server with the CRDs, a GatewayClass of wasmgate's controller
/// and a Gateway `edge` (one HTTP listener) in `default`.
pub struct Cluster {
    pub api: KubeApiServer,
    pub dir: tempfile::TempDir,
    pub k: Client,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let api = KubeApiServer::start();
        let dir = tempfile::tempdir().unwrap();
        let k = kube_client(&api, dir.path()).await;
        install_crds(&k).await;
        let classes: Api<GatewayClass> = Api::all(k.clone());
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                    "metadata": {"name": "wasmgate"},
                    "spec": {"controllerName": "wasmgate.io/gateway-controller"}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        create::<Gateway>(&k, json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "edge"},
            "spec": {"gatewayClassName": "wasmgate", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
        }))
        .await;
        Cluster { api, dir, k }
    }

    /// A node following this API server; `extra` is more of its file.
    pub fn node(&self, extra: &str) -> GatewayProc {
        self.node_as(&self.dir.path().join("kubeconfig"), "", extra)
    }

    /// A node with `kubeconfig`'s identity; `source` is more of its
    /// `config.kubernetes`, `extra` more of its file. Unless `source` says
    /// its own `grants`, the `default` namespace's WasmPlugins may load the
    /// test plugins ([`plugin_grant`]) and nothing more.
    pub fn node_as(&self, kubeconfig: &std::path::Path, source: &str, extra: &str) -> GatewayProc {
        let grants = match source.contains("grants:") {
            true => String::new(),
            false => format!(", grants: {{default: {}}}", plugin_grant(&[])),
        };
        GatewayProc::start(&format!(
            "listen: \"{{listen}}\"\nadmin: \"{{admin}}\"\nconfig: {{kubernetes: {{kubeconfig: \"{}\"{source}{grants}}}}}\n{extra}",
            kubeconfig.display()
        ))
    }
}

/// A namespace grant (YAML) of the test plugins' directory and `services`.
pub fn plugin_grant(services: &[&str]) -> String {
    let dir = crate::common::plugin("capabilities");
    format!(
        "{{files: [\"{}\"], services: [{}]}}",
        dir.parent().unwrap().display(),
        services.join(", ")
    )
}

pub async fn until<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub async fn create<K>(c: &Client, object: Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::default_namespaced(c.clone());
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

/// A Service `name` with port 80 (`http`) and an EndpointSlice whose ready
/// endpoints are `upstreams`.
pub async fn service(c: &Client, name: &str, upstreams: &[&Upstream]) {
    let addresses: Vec<String> = upstreams.iter().map(|u| u.address()).collect();
    service_at(c, name, &addresses, None).await;
}

/// A Service `name` with port 80 (`http`, of `app_protocol` when given) and
/// an EndpointSlice whose ready endpoints are `addresses` (`IP:port`, one
/// port for all).
pub async fn service_at(c: &Client, name: &str, addresses: &[String], app_protocol: Option<&str>) {
    let port: u16 = addresses[0].rsplit_once(':').unwrap().1.parse().unwrap();
    let mut service_port = json!({"name": "http", "port": 80, "targetPort": port});
    if let Some(p) = app_protocol {
        service_port["appProtocol"] = json!(p);
    }
    create::<Service>(
        c,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": [service_port]}
        }),
    )
    .await;
    create::<EndpointSlice>(c, json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": addresses.iter().map(|a| json!({
            "addresses": [a.split(':').next().unwrap()],
            "conditions": {"ready": true}
        })).collect::<Vec<_>>()
    }))
    .await;
}

pub fn route(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "edge"}], "rules": rules}
    })
}

/// The condition `kind` of the route's first parent, once written.
pub async fn route_condition(c: &Client, name: &str, kind: &str) -> Value {
    let api: Api<HttpRoute> = Api::default_namespaced(c.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let route = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        let found = route["status"]["parents"][0]["conditions"]
            .as_array()
            .and_then(|all| all.iter().find(|x| x["type"] == kind).cloned());
        if let Some(found) = found {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {kind} condition on {name}: {route}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A TLS Secret `name` (in `default`) holding `issued`'s certificate and key.
pub fn tls_secret(name: &str, issued: &wasmgate_testkit::pki::Issued) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
           "type": "kubernetes.io/tls",
           "stringData": {"tls.crt": issued.cert_pem(), "tls.key": issued.key_pem()}})
}

/// Gateway `secure` (in `default`): HTTPS listeners on port 443, `shop` for
/// shop.example.com with Secret `shop_secret` and `api` for api.example.com
/// with `api_secret`; and HTTPRoute `secure` on it to Service `app`.
pub async fn secure_gateway(c: &Client, shop_secret: &str, api_secret: &str) {
    create::<Gateway>(
        c,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "secure"},
            "spec": {"gatewayClassName": "wasmgate", "listeners": [
                {"name": "shop", "port": 443, "protocol": "HTTPS", "hostname": "shop.example.com",
                 "tls": {"certificateRefs": [{"name": shop_secret}]}},
                {"name": "api", "port": 443, "protocol": "HTTPS", "hostname": "api.example.com",
                 "tls": {"certificateRefs": [{"name": api_secret}]}}]}
        }),
    )
    .await;
    let mut secure_route = route(
        "secure",
        json!([{"backendRefs": [{"name": "app", "port": 80}]}]),
    );
    secure_route["spec"]["parentRefs"] = json!([{"name": "secure"}]);
    create::<HttpRoute>(c, secure_route).await;
}

/// The condition `kind` of listener `listener` of Gateway `gateway` (in
/// `default`), as the node last wrote it.
pub async fn listener_condition(
    c: &Client,
    gateway: &str,
    listener: &str,
    kind: &str,
) -> Option<Value> {
    let gateways: Api<Gateway> = Api::default_namespaced(c.clone());
    let g = serde_json::to_value(gateways.get(gateway).await.ok()?).unwrap();
    let listeners = g["status"]["listeners"].as_array()?.clone();
    let l = listeners.iter().find(|l| l["name"] == listener)?;
    (l["conditions"].as_array()?.iter())
        .find(|c| c["type"] == kind)
        .cloned()
}

pub async fn until_status(c: &HttpClient, gw: &GatewayProc, path: &str, status: u16) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = send(c, "GET", &gw.url(path), &[], "").await;
        if reply.status == status {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered {status} (last {}: {})",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Creates every object of a manifest (`kubectl create -f`), a file of
/// the repository.
pub async fn create_from_file(c: &Client, file: &str) {
    use kube::api::{DynamicObject, GroupVersionKind};
    use kube::discovery::{pinned_kind, Scope};
    let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(document).unwrap();
        if value.is_null() {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(value).unwrap();
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let (resource, capabilities) = pinned_kind(c, &gvk).await.unwrap();
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Cluster => Api::all_with(c.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                c.clone(),
                object.metadata.namespace.as_deref().unwrap_or("default"),
                &resource,
            ),
        };
        if let Err(e) = api.create(&PostParams::default(), &object).await {
            panic!("{file}: {} {:?}: {e}", types.kind, object.metadata.name);
        }
    }
}
