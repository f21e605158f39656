//! The node's side of the API server: a reflector per kind (kube-runtime's
//! watch with its backoff, an in-memory copy of every object), and one task
//! that, after any change (gathered for 20 ms), translates the whole
//! snapshot (`translate.rs`), applies the result through the node's one
//! build-and-swap (`LiveGateway::apply`, the path of a file reload and of
//! etcd), and writes the statuses that changed (`status.rs`). A snapshot
//! that does not build is rejected whole and the node keeps serving what it
//! had; the API server going away leaves the node serving its last
//! configuration while the watches reconnect.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use wasmgate_config::{GatewayConfig, KubernetesSource};
use wasmgate_gateway::config_store::{ConfigStore, EditError, StoreFuture};
use wasmgate_gateway::LiveGateway;

use crate::status::{self, Written};
use crate::translate::{translate, Snapshot};

/// How long a burst of changes is gathered before it is applied.
const SETTLE: Duration = Duration::from_millis(20);

pub struct KubernetesStore {
    controller: String,
    local: GatewayConfig,
    live: Weak<LiveGateway>,
    client: Client,
    readers: Readers,
    state: Mutex<State>,
    /// One pass at a time (the watch's and `POST /reload`'s).
    pass: tokio::sync::Mutex<Written>,
}

struct Readers {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    routes: Store<HttpRoute>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
}

#[derive(Default)]
struct State {
    applied: Option<GatewayConfig>,
    rejected: Option<String>,
    passes: u64,
    routes: usize,
}

/// A client for `source`: its kubeconfig, else kube's inference
/// (`$KUBECONFIG`, `~/.kube/config`, the pod's service account).
pub async fn client(source: &KubernetesSource, base: &Path) -> anyhow::Result<Client> {
    // kube's rustls takes the process's provider (ring, as every other TLS
    // connection wasmgate makes).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match &source.kubeconfig {
        Some(file) => {
            let path = base.join(file);
            let kubeconfig = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
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
        Arc::new(KubernetesStore {
            controller: source.controller_name.clone(),
            local,
            live: Arc::downgrade(live),
            readers: Readers {
                classes: watch(Api::all(client.clone())),
                gateways: watch(Api::all(client.clone())),
                routes: watch(Api::all(client.clone())),
                services: watch(Api::all(client.clone())),
                slices: watch(Api::all(client.clone())),
            },
            client,
            state: Mutex::new(State::default()),
            pass: tokio::sync::Mutex::new(Written::default()),
        })
    }

    /// Applies every change for as long as the node lives.
    pub async fn run(self: Arc<Self>) {
        self.readers.wait_until_ready().await;
        tracing::info!(controller = %self.controller, "following the Kubernetes API server");
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
    async fn pass(&self, live: &LiveGateway) -> Result<(), String> {
        let mut written = self.pass.lock().await;
        let snapshot = self.readers.snapshot();
        let translation = translate(&self.controller, &snapshot);
        let mut config = self.local.clone();
        config.routes = translation.routes.clone();
        config.upstreams = translation.upstreams.clone();
        let unchanged = self.state.lock().expect("state").applied.as_ref() == Some(&config);
        let outcome = if unchanged {
            Ok(())
        } else {
            live.apply(config.clone(), "kubernetes: watch")
                .await
                .map(|_| ())
        };
        {
            let mut state = self.state.lock().expect("state");
            state.passes += 1;
            match &outcome {
                Ok(()) => {
                    state.routes = config.routes.len();
                    state.applied = Some(config);
                    state.rejected = None;
                }
                Err(reason) => state.rejected = Some(reason.clone()),
            }
        }
        if outcome.is_ok() {
            let generations = generations(&snapshot);
            status::write(
                &self.client,
                &self.controller,
                &translation,
                &generations,
                &mut written,
            )
            .await;
        }
        outcome
    }
}

impl Readers {
    async fn wait_until_ready(&self) {
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
            services: all(&self.services),
            slices: all(&self.slices),
        }
    }
}

/// A reflector for `api`'s objects, kept up by a task of its own; every
/// event wakes the store's pass.
fn watch<K>(api: Api<K>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => NOTIFY.notify_one(),
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&Default::default()), error = %e, "watching the API server; retrying")
                }
            }
        }
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
        Box::pin(async {})
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
        Box::pin(async move { json!({"source": "kubernetes", "controller_name": self.controller}) })
    }

    fn describe(&self) -> serde_json::Value {
        let state = self.state.lock().expect("state");
        json!({
            "kubernetes": {
                "controller_name": self.controller,
                "passes": state.passes,
                "routes": state.routes,
                "rejected": state.rejected,
            }
        })
    }

    fn revision(&self) -> i64 {
        0
    }
}
