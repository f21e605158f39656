//! The node's side of the API server: a reflector per kind (kube-runtime's
//! watch with its backoff, an in-memory copy of every object; Secrets only
//! by name, `secrets.rs`), and one task
//! that, after any change (gathered for 20 ms), translates the whole
//! snapshot (`translate.rs`), applies the result through the node's one
//! build-and-swap (`LiveGateway::apply`, the path of a file reload and of
//! etcd), and writes the statuses that changed (`status.rs`). A snapshot
//! that does not build is rejected whole and the node keeps serving what it
//! had; the API server going away leaves the node serving its last
//! configuration while the watches reconnect.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use wasmgate_config::{GatewayConfig, KubernetesSource, Scheme};
use wasmgate_gateway::config_store::{ConfigStore, EditError, StoreFuture};
use wasmgate_gateway::LiveGateway;

use crate::model::{Node, Snapshot, Translation};
use crate::secrets::NamedSecrets;
use crate::status::{self, Written};
use crate::translate::translate;
use crate::wasmplugin::WasmPlugin;
use crate::watches::Watches;

/// How long a burst of changes is gathered before it is applied.
const SETTLE: Duration = Duration::from_millis(20);

/// How long a WasmPlugin that did not load is left out before the node
/// tries it again (sooner when its spec changes).
const RETRY_BROKEN: Duration = Duration::from_secs(60);

pub struct KubernetesStore {
    /// The controller name and port map the translation needs.
    node: Node,
    local: GatewayConfig,
    live: Weak<LiveGateway>,
    client: Client,
    readers: Readers,
    state: Mutex<State>,
    /// How every watch is doing.
    watches: Arc<Watches>,
    /// One pass at a time (the watch's and `POST /reload`'s).
    pass: tokio::sync::Mutex<Written>,
    leader: crate::leader::Leader,
}

struct Readers {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    routes: Store<HttpRoute>,
    grpc_routes: Store<GrpcRoute>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    wasmplugins: Store<WasmPlugin>,
    grants: Store<ReferenceGrant>,
    namespaces: Store<Namespace>,
    tls_policies: Store<BackendTlsPolicy>,
    /// The CAs BackendTLSPolicies name; the services' list.
    config_maps: Store<ConfigMap>,
    /// The Secrets the resources above name, each watched by name.
    secrets: NamedSecrets,
}

#[derive(Default)]
struct State {
    applied: Option<GatewayConfig>,
    rejected: Option<String>,
    passes: u64,
    routes: usize,
    /// WasmPlugins (by plugin name) that did not load, left out for now.
    broken: BTreeMap<String, Broken>,
    /// Why the services ConfigMap's services are not used, if they are not.
    services_problem: Option<String>,
}

struct Broken {
    /// The spec that failed: a changed one is tried at once.
    spec: serde_json::Value,
    since: Instant,
    reason: String,
}

/// A client for `source`: its kubeconfig, else kube's inference
/// (`$KUBECONFIG`, `~/.kube/config`, the pod's service account).
pub async fn client(source: &KubernetesSource, base: &Path) -> anyhow::Result<Client> {
    // kube's rustls takes the process's provider (ring, as every other TLS
    // connection wasmgate makes).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = match &source.kubeconfig {
        Some(file) => {
            let path = wasmgate_base::paths::resolve(base, file);
            let kubeconfig = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    // An API server that cannot be reached says so within seconds.
    config.connect_timeout = Some(crate::watches::CONNECT_TIMEOUT);
    Ok(Client::try_from(config)?)
}

impl KubernetesStore {
    /// Starts the watches; `run` applies what they bring.
    pub fn new(
        local: GatewayConfig,
        source: &KubernetesSource,
        client: Client,
        live: &Arc<LiveGateway>,
    ) -> Arc<KubernetesStore> {
        let node = node(source, &local);
        let health = Arc::new(Watches::default());
        Arc::new(KubernetesStore {
            node,
            local,
            live: Arc::downgrade(live),
            readers: Readers {
                classes: watch(Api::all(client.clone()), &health),
                gateways: watch(Api::all(client.clone()), &health),
                routes: watch(Api::all(client.clone()), &health),
                grpc_routes: watch(Api::all(client.clone()), &health),
                services: watch(Api::all(client.clone()), &health),
                slices: watch(Api::all(client.clone()), &health),
                wasmplugins: watch(Api::all(client.clone()), &health),
                grants: watch(Api::all(client.clone()), &health),
                namespaces: watch(Api::all(client.clone()), &health),
                tls_policies: watch(Api::all(client.clone()), &health),
                config_maps: watch(Api::all(client.clone()), &health),
                secrets: NamedSecrets::new(client.clone(), health.clone()),
            },
            watches: health,
            leader: crate::leader::Leader::start(source, client.clone(), &NOTIFY),
            client,
            state: Mutex::new(State::default()),
            pass: tokio::sync::Mutex::new(Written::default()),
        })
    }

    /// Applies every change for as long as the node lives.
    pub async fn run(self: Arc<Self>) {
        self.readers.wait_until_ready(&self.client).await;
        tracing::info!(controller = %self.node.controller, "following the Kubernetes API server");
        loop {
            let Some(live) = self.live.upgrade() else {
                return;
            };
            if let Err(reason) = self.pass(&live).await {
                tracing::error!("the Gateway API resources do not build on this node; it keeps serving what it had:\n{reason}");
            }
            drop(live);
            tokio::select! {
                () = NOTIFY.notified() => {}
                // Watches are not the only source of truth: a periodic pass
                // catches an event lost while reconnecting.
                () = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            tokio::time::sleep(SETTLE).await;
        }
    }

    /// Translates, applies (when the result changed) and writes statuses.
    /// A WasmPlugin that does not load is left out and the rest applied
    /// (`plugins.rs` says what its routes do meanwhile).
    async fn pass(&self, live: &LiveGateway) -> Result<(), String> {
        let mut written = self.pass.lock().await;
        let mut snapshot = self.readers.snapshot();
        let named = crate::secrets::named(
            &snapshot,
            &self.node.controller,
            self.node.services.as_ref(),
        );
        self.readers.secrets.follow(named, &NOTIFY).await;
        self.readers.secrets.fill(&mut snapshot);
        let mut broken = self.still_broken(&snapshot);
        let mut attempt = 0;
        let (translation, outcome) = loop {
            attempt += 1;
            let translation = translate(&self.node, &snapshot, &broken);
            let config = self.config(&translation);
            let unchanged = self.state.lock().expect("state").applied.as_ref() == Some(&config);
            let outcome = if unchanged {
                Ok(())
            } else {
                live.apply(config.clone(), "kubernetes: watch")
                    .await
                    .map(|_| ())
            };
            let failed = match &outcome {
                Err(reason) if attempt == 1 => plugin_failures(reason, &translation),
                _ => Vec::new(),
            };
            if failed.is_empty() {
                let mut state = self.state.lock().expect("state");
                if state.services_problem != translation.services_problem {
                    if let Some(why) = &translation.services_problem {
                        tracing::warn!("the services of kubernetes.services are not used (the node file's are): {why}");
                    }
                    state.services_problem = translation.services_problem.clone();
                }
                if outcome.is_ok() {
                    state.routes = config.routes.len();
                    state.applied = Some(config);
                }
                break (translation, outcome);
            }
            let mut state = self.state.lock().expect("state");
            for (plugin, reason) in failed {
                tracing::warn!(plugin = %plugin, "a WasmPlugin did not load; its routes answer 500 (FAIL_CLOSE) or run without it (FAIL_OPEN) until it does: {reason}");
                let spec = spec_of(&snapshot, &plugin);
                broken.insert(plugin.clone(), reason.clone());
                state.broken.insert(
                    plugin,
                    Broken {
                        spec,
                        since: Instant::now(),
                        reason,
                    },
                );
            }
        };
        {
            let mut state = self.state.lock().expect("state");
            state.passes += 1;
            state.rejected = outcome.as_ref().err().cloned();
        }
        if outcome.is_ok() && self.leader.is_leader() {
            if self.leader.take_new_term() {
                *written = Written::default();
            }
            let generations = generations(&snapshot);
            status::write(
                &self.client,
                &self.node.controller,
                &translation,
                &generations,
                &mut written,
            )
            .await;
        }
        outcome
    }

    /// The node's own file with the translation's routes, upstreams,
    /// certificates and plugins.
    fn config(&self, translation: &Translation) -> GatewayConfig {
        let mut config = self.local.clone();
        config.routes = translation.routes.clone();
        config.upstreams = translation.upstreams.clone();
        config.certificates = (self.local.certificates.iter())
            .chain(&translation.certificates)
            .cloned()
            .collect();
        config.plugins.extend(translation.plugins.iter().cloned());
        config.services.extend(translation.services.iter().cloned());
        config
    }

    /// The WasmPlugins still left out: same spec, failed recently.
    fn still_broken(&self, snapshot: &Snapshot) -> BTreeMap<String, String> {
        let mut state = self.state.lock().expect("state");
        state.broken.retain(|plugin, b| {
            b.since.elapsed() < RETRY_BROKEN && spec_of(snapshot, plugin) == b.spec
        });
        (state.broken.iter())
            .map(|(plugin, b)| (plugin.clone(), b.reason.clone()))
            .collect()
    }
}

/// The controller name, and the node's listener behind each Gateway port
/// of `kubernetes.ports` (checked with the node file: each is one).
fn node(source: &KubernetesSource, local: &GatewayConfig) -> Node {
    let listeners = local.all_listeners();
    let ports = (source.ports.iter())
        .filter_map(|(gateway_port, port)| {
            let listener = listeners.iter().find(|l| {
                l.address.parse::<std::net::SocketAddr>().map(|a| a.port()) == Ok(*port)
            })?;
            let scheme = match listener.tls {
                Some(_) => Scheme::Https,
                None => Scheme::Http,
            };
            Some((*gateway_port, (*port, scheme)))
        })
        .collect();
    Node {
        controller: source.controller_name.clone(),
        ports,
        registry: source.registry.clone(),
        services: (source.services.as_deref())
            .and_then(|s| s.split_once('/'))
            .map(|(ns, name)| (ns.to_string(), name.to_string())),
        grants: source.grants.clone(),
    }
}

/// The spec of the WasmPlugin whose plugin is named `plugin`, with the
/// version of its pull Secret: a fixed Secret is tried at once too.
fn spec_of(snapshot: &Snapshot, plugin: &str) -> serde_json::Value {
    (snapshot.wasmplugins.iter())
        .find(|wp| {
            crate::plugins::plugin_name(&wp.namespace().unwrap_or_default(), &wp.name_any())
                == plugin
        })
        .map(|wp| {
            let secret = (wp.spec.image_pull_secret.as_ref()).and_then(|name| {
                (snapshot.pull_secrets.iter())
                    .find(|s| s.name_any() == *name && s.namespace() == wp.namespace())
                    .and_then(|s| s.resource_version())
            });
            json!({"spec": wp.spec, "pull_secret": secret})
        })
        .unwrap_or_default()
}

/// The WasmPlugins a rejected build names (`plugins[wp.ns.name]: why`),
/// with why.
fn plugin_failures(reason: &str, translation: &Translation) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for plugin in &translation.plugins {
        let marker = format!("plugins[{}]", plugin.name);
        let why: Vec<&str> = (reason.lines())
            .filter_map(|line| line.split_once(&marker))
            .map(|(_, rest)| rest.trim_start_matches([':', ' ', '.']))
            .collect();
        if !why.is_empty() {
            found.push((plugin.name.clone(), why.join("; ")));
        }
    }
    found
}

impl Readers {
    async fn wait_until_ready(&self, client: &Client) {
        // WasmPlugins are optional: without their CRD the node serves
        // routes and says so; with it, no route is served before its
        // plugins are known. ReferenceGrants too: without their CRD, no
        // cross-namespace backend is permitted.
        optional_ready(
            client,
            &self.wasmplugins,
            "the WasmPlugin CRD (deploy/kubernetes/wasmplugin-crd.yaml) is not installed: routes are served without WasmPlugins until it is",
        )
        .await;
        optional_ready(
            client,
            &self.grpc_routes,
            "the GRPCRoute CRD is not installed: GRPCRoutes are served once it is",
        )
        .await;
        optional_ready(
            client,
            &self.grants,
            "the ReferenceGrant CRD is not installed: backends in other namespaces are refused",
        )
        .await;
        optional_ready(
            client,
            &self.tls_policies,
            "the BackendTLSPolicy CRD is not installed (or not readable): backends are reached without TLS until it is",
        )
        .await;
        optional_ready(
            client,
            &self.config_maps,
            "ConfigMaps cannot be read (RBAC: deploy/kubernetes/rbac.yaml): BackendTLSPolicies' CA certificates are not found",
        )
        .await;
        optional_ready(
            client,
            &self.namespaces,
            "Namespaces cannot be read (RBAC: deploy/kubernetes/rbac.yaml): listeners that allow routes by namespace labels (Selector) take none",
        )
        .await;
        let _ = self.classes.wait_until_ready().await;
        let _ = self.gateways.wait_until_ready().await;
        let _ = self.routes.wait_until_ready().await;
        let _ = self.services.wait_until_ready().await;
        let _ = self.slices.wait_until_ready().await;
    }

    fn snapshot(&self) -> Snapshot {
        fn all<K: Clone + kube::Resource>(store: &Store<K>) -> Vec<K>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            store.state().iter().map(|k| (**k).clone()).collect()
        }
        Snapshot {
            classes: all(&self.classes),
            gateways: all(&self.gateways),
            routes: all(&self.routes),
            grpc_routes: all(&self.grpc_routes),
            services: all(&self.services),
            slices: all(&self.slices),
            wasmplugins: all(&self.wasmplugins),
            grants: all(&self.grants),
            tls_policies: all(&self.tls_policies),
            config_maps: all(&self.config_maps),
            namespaces: all(&self.namespaces),
            // Filled from the named watches (`secrets.rs`).
            ..Snapshot::default()
        }
    }
}

/// Waits for `store` unless its kind's CRD is not installed or the node
/// may not read it (then warns and goes on: the watch picks the kind up
/// when it can).
async fn optional_ready<K>(client: &Client, store: &Store<K>, missing: &str)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => tracing::warn!("{missing}"),
        _ => {
            let _ = store.wait_until_ready().await;
        }
    }
}

/// A reflector for `api`'s objects, kept up by a task of its own
/// (`watches.rs` retries it and keeps its health); every event wakes the
/// store's pass.
fn watch<K>(api: Api<K>, health: &Arc<Watches>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let config = watcher::Config::default();
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).touched_objects();
    let health = health.clone();
    tokio::spawn(async move {
        let kind = K::kind(&Default::default()).into_owned();
        health
            .drive(&kind, stream, |event| {
                if event.is_ok() {
                    NOTIFY.notify_one();
                }
            })
            .await
    });
    reader
}

/// Wakes the pass after any watched change (one store per process).
static NOTIFY: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn generations(snapshot: &Snapshot) -> HashMap<String, Option<i64>> {
    let mut out = HashMap::new();
    for c in &snapshot.classes {
        out.insert(
            format!("gatewayclass/{}", c.name_any()),
            c.metadata.generation,
        );
    }
    for g in &snapshot.gateways {
        out.insert(
            format!(
                "gateway/{}/{}",
                g.namespace().unwrap_or_default(),
                g.name_any()
            ),
            g.metadata.generation,
        );
    }
    out
}

impl ConfigStore for KubernetesStore {
    fn latest(&self) -> Result<GatewayConfig, EditError> {
        Err(EditError::WritesOff(
            "this node's routes and upstreams come from Kubernetes resources (`config.kubernetes`): change the Gateways, HTTPRoutes and Services with kubectl".into(),
        ))
    }

    fn write(
        &self,
        _changes: wasmgate_config::AdminChanges,
    ) -> StoreFuture<'_, Result<(), EditError>> {
        Box::pin(async move { Err(self.latest().expect_err("never writable")) })
    }

    fn rejected(&self) -> Option<String> {
        self.state.lock().expect("state").rejected.clone()
    }

    fn leave(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move { self.leader.release().await })
    }

    fn reload(&self) -> StoreFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let live = self.live.upgrade().ok_or("the node is stopping")?;
            self.state.lock().expect("state").applied = None;
            self.pass(&live).await?;
            Ok(live.status().generation)
        })
    }

    fn cluster(&self) -> StoreFuture<'_, serde_json::Value> {
        Box::pin(async move {
            json!({
                "source": "kubernetes",
                "controller_name": self.node.controller,
                "watches": self.watches.describe(),
                "unhealthy_watches": self.watches.unhealthy(),
            })
        })
    }

    fn describe(&self) -> serde_json::Value {
        let state = self.state.lock().expect("state");
        json!({
            "kubernetes": {
                "controller_name": self.node.controller,
                "passes": state.passes,
                "routes": state.routes,
                "rejected": state.rejected,
                "status_writer": self.leader.is_leader(),
                "services_problem": state.services_problem,
                "secrets": self.readers.secrets.describe(),
                "watches": self.watches.describe(),
                "unhealthy_watches": self.watches.unhealthy(),
                "wasmplugins_not_loaded": state.broken.iter()
                    .map(|(plugin, b)| (plugin.clone(), b.reason.clone()))
                    .collect::<BTreeMap<_, _>>(),
            }
        })
    }

    fn revision(&self) -> i64 {
        0
    }
}
