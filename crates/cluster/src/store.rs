//! A node's configuration in etcd: loaded whole, then followed with a watch
//! from the revision it was loaded at; every change goes through the same
//! atomic build-and-swap as a file reload ([`LiveGateway::apply`]), so a
//! change that does not build on this node is rejected here (and reported in
//! `/cluster`) while the previous version keeps serving. The admin API's
//! writes go to etcd as one transaction that compares each key's revision
//! with the one this node last saw, so two admins cannot lose each other's
//! change (the second gets 409).
//!
//! When etcd is unreachable the node keeps serving what it has, and
//! reconnects with backoff; it resumes its watch from the last revision it
//! saw, or reloads whole when etcd compacted that revision away. A node that
//! starts while etcd is down serves nothing (503, `/readyz` 503) until it has
//! a configuration, or starts from `cache_file`, the last one it applied.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Txn, TxnOp, WatchOptions,
};
use serde_json::{json, Value};
use wasmgate_gateway::admin_file::AdminChanges;
use wasmgate_gateway::config::{ConfigSource, GatewayConfig};
use wasmgate_gateway::config_store::{ConfigStore, StoreFuture};
use wasmgate_gateway::reload::EditError;
use wasmgate_gateway::LiveGateway;

use crate::layout::{self, Objects};

/// Backoff between attempts to reach etcd: from 100 ms, doubling, to 5 s.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Watch events arriving this close together are applied as one change
/// (a `config push` is many keys in one revision, but a script's edits may
/// come as several).
const SETTLE: Duration = Duration::from_millis(20);

pub struct EtcdStore {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) node: String,
    /// The node's own file: listen, admin, limits (no routes).
    local: GatewayConfig,
    cache_file: Option<PathBuf>,
    pub(crate) live: Weak<LiveGateway>,
    client: tokio::sync::Mutex<Option<Client>>,
    pub(crate) state: Mutex<State>,
    /// Wakes the node's registration when what it reports changed.
    pub(crate) changed: tokio::sync::Notify,
}

pub(crate) struct State {
    /// The configuration objects as last read or watched.
    pub objects: Objects,
    /// The objects of the configuration this node serves: what an admin
    /// edit is based on, so what its compare-and-swap compares with (the
    /// objects may be ahead, absorbed from the watch but not yet applied).
    pub applied_objects: Objects,
    /// The latest etcd revision seen (loaded, watched or written).
    pub seen: i64,
    /// The revision whose configuration this node serves (0: none yet).
    pub applied: i64,
    pub connected: bool,
    /// Why the last change was rejected here, or etcd could not be reached.
    pub last_error: Option<String>,
    pub started_at_ms: u64,
}

impl EtcdStore {
    /// A store for the node whose own file is `local` (with its `config`).
    pub fn new(local: GatewayConfig, live: &Arc<LiveGateway>) -> Result<Arc<EtcdStore>> {
        let source: ConfigSource = local
            .config
            .clone()
            .context("the node's file has no `config` section")?;
        let node = source
            .node_name
            .clone()
            .unwrap_or_else(|| local.listen.clone());
        Ok(Arc::new(EtcdStore {
            endpoints: source.etcd.clone(),
            prefix: source.prefix.trim_end_matches('/').to_string(),
            node,
            cache_file: source.cache_file.clone(),
            local,
            live: Arc::downgrade(live),
            client: tokio::sync::Mutex::new(None),
            changed: tokio::sync::Notify::new(),
            state: Mutex::new(State {
                objects: Objects::new(),
                applied_objects: Objects::new(),
                seen: 0,
                applied: 0,
                connected: false,
                last_error: None,
                started_at_ms: now_ms(),
            }),
        }))
    }

    /// Follows etcd for as long as the node lives: load, watch, apply;
    /// reconnecting with backoff when etcd goes away.
    pub async fn run(self: Arc<Self>) {
        let mut backoff = BACKOFF_MIN;
        let mut first = true;
        loop {
            if self.live.upgrade().is_none() {
                return;
            }
            let loaded = self.load().await;
            if let Err(e) = &loaded {
                self.failed(format!("cannot read the configuration from etcd: {e:#}"));
                if first {
                    self.start_from_cache().await;
                }
            }
            first = false;
            if loaded.is_ok() {
                backoff = BACKOFF_MIN;
                // Follows until the watch breaks, then resumes from the last
                // revision seen; reloads whole when that was compacted away.
                loop {
                    match self.watch().await {
                        Ok(Compacted) => break,
                        Err(e) => {
                            self.failed(format!("lost etcd: {e:#}"));
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(BACKOFF_MAX);
                        }
                    }
                }
                continue;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// A connected client (connecting if needed).
    pub(crate) async fn client(&self) -> Result<Client> {
        let mut client = self.client.lock().await;
        if let Some(client) = &*client {
            return Ok(client.clone());
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        let connected = Client::connect(&self.endpoints, Some(options))
            .await
            .with_context(|| format!("connecting to etcd at {}", self.endpoints.join(", ")))?;
        *client = Some(connected.clone());
        Ok(connected)
    }

    /// Forgets the client after a failure, so the next use reconnects.
    async fn disconnect(&self) {
        *self.client.lock().await = None;
        self.state.lock().expect("store state").connected = false;
    }

    fn failed(&self, reason: String) {
        tracing::warn!(node = %self.node, "{reason}");
        let mut state = self.state.lock().expect("store state");
        state.connected = false;
        state.last_error = Some(reason);
    }

    /// Reads every object under the prefix and applies them.
    async fn load(&self) -> Result<i64> {
        let mut client = self.client().await?;
        let response = match client
            .get(
                format!("{}/", self.prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await
        {
            Ok(response) => response,
            Err(e) => {
                self.disconnect().await;
                return Err(e.into());
            }
        };
        let revision = response.header().map_or(0, |h| h.revision());
        let mut objects = Objects::new();
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if layout::is_config_key(&self.prefix, &key) {
                objects.insert(key, (kv.mod_revision(), kv.value().to_vec()));
            }
        }
        {
            let mut state = self.state.lock().expect("store state");
            state.objects = objects;
            state.seen = revision;
            state.connected = true;
        }
        self.apply_current(revision, "etcd: load").await;
        Ok(revision)
    }

    /// Watches from the revision after the last seen, applying each settled
    /// batch of changes, until the stream fails (an error) or etcd says that
    /// revision was compacted.
    async fn watch(&self) -> Result<Compacted> {
        let mut client = self.client().await?;
        let start = self.state.lock().expect("store state").seen + 1;
        let options = WatchOptions::new().with_prefix().with_start_revision(start);
        let mut stream = match client
            .watch(format!("{}/", self.prefix), Some(options))
            .await
        {
            Ok(stream) => stream,
            Err(e) => {
                self.disconnect().await;
                return Err(e.into());
            }
        };
        {
            let mut state = self.state.lock().expect("store state");
            state.connected = true;
            if state
                .last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("lost etcd"))
            {
                state.last_error = None;
            }
        }
        tracing::info!(node = %self.node, from = start, "watching etcd");
        loop {
            let message = match stream.message().await {
                Ok(Some(message)) => message,
                Ok(None) => {
                    self.disconnect().await;
                    anyhow::bail!("the watch stream ended");
                }
                Err(e) => {
                    self.disconnect().await;
                    return Err(e.into());
                }
            };
            if message.compact_revision() > 0 {
                tracing::warn!(node = %self.node, compacted = message.compact_revision(), "etcd compacted the revision this node watched from: reloading the whole configuration");
                return Ok(Compacted);
            }
            if message.canceled() {
                self.disconnect().await;
                anyhow::bail!("etcd cancelled the watch: {}", message.cancel_reason());
            }
            let changed = self.absorb(&message);
            if changed {
                // Let the rest of a burst arrive, then apply once.
                loop {
                    match tokio::time::timeout(SETTLE, stream.message()).await {
                        Ok(Ok(Some(more))) if more.compact_revision() == 0 => {
                            self.absorb(&more);
                        }
                        Ok(Ok(Some(_))) => return Ok(Compacted),
                        Ok(_) => {
                            self.disconnect().await;
                            anyhow::bail!("the watch stream ended");
                        }
                        Err(_) => break,
                    }
                }
            }
            if changed {
                let seen = self.state.lock().expect("store state").seen;
                self.apply_current(seen, "etcd: watch").await;
            }
        }
    }

    /// Folds a watch message's events into the objects; whether any was a
    /// configuration key.
    fn absorb(&self, message: &etcd_client::WatchResponse) -> bool {
        let mut state = self.state.lock().expect("store state");
        if let Some(header) = message.header() {
            state.seen = state.seen.max(header.revision());
        }
        let mut changed = false;
        for event in message.events() {
            let Some(kv) = event.kv() else { continue };
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if !layout::is_config_key(&self.prefix, &key) {
                continue;
            }
            changed = true;
            state.seen = state.seen.max(kv.mod_revision());
            match event.event_type() {
                EventType::Put => {
                    state
                        .objects
                        .insert(key, (kv.mod_revision(), kv.value().to_vec()));
                }
                EventType::Delete => {
                    state.objects.remove(&key);
                }
            }
        }
        changed
    }

    /// Builds and serves the configuration the objects make, as revision
    /// `revision`, unless it is what the node serves already (the echo of
    /// its own write, a node's registration).
    async fn apply_current(&self, revision: i64, trigger: &str) {
        let Some(live) = self.live.upgrade() else {
            return;
        };
        let objects = {
            let mut state = self.state.lock().expect("store state");
            // The echo of this node's own admin write (or the removal of a
            // rejected object): the objects are the ones it built and serves
            // already (same values, same revisions), so there is nothing to
            // build, and nothing it failed to apply.
            if live.is_ready() && state.objects == state.applied_objects {
                state.applied = state.applied.max(revision);
                state.last_error = None;
                drop(state);
                self.changed.notify_one();
                return;
            }
            state.objects.clone()
        };
        let merged = layout::merge(&self.local, &self.prefix, &objects);
        let result = match merged {
            Ok(config) if live.is_ready() && config == *live.current().config() => Ok(None),
            Ok(config) => live
                .apply(config, &format!("{trigger} (revision {revision})"))
                .await
                .map(Some),
            Err(e) => Err(format!("revision {revision}: {e:#}")),
        };
        let mut state = self.state.lock().expect("store state");
        self.changed.notify_one();
        match result {
            Ok(applied) => {
                state.applied = revision;
                state.applied_objects = objects.clone();
                state.last_error = None;
                drop(state);
                if applied.is_some() {
                    self.write_cache(revision, &objects);
                }
            }
            Err(reason) => {
                tracing::error!(node = %self.node, revision, "configuration from etcd rejected; the previous version keeps serving:\n{reason}");
                state.last_error = Some(format!("revision {revision} rejected: {reason}"));
            }
        }
    }

    /// Keeps the configuration applied last, to start from it while etcd is down.
    fn write_cache(&self, revision: i64, objects: &Objects) {
        let Some(path) = &self.cache_file else { return };
        let entries: serde_json::Map<String, Value> = objects
            .iter()
            .map(|(key, (rev, bytes))| {
                let value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
                (key.clone(), json!({ "mod_revision": rev, "value": value }))
            })
            .collect();
        let text = json!({ "prefix": self.prefix, "revision": revision, "objects": entries });
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&text).expect("JSON")) {
            tracing::warn!(file = %path.display(), error = %e, "cannot write the configuration cache");
        }
    }

    /// At start-up with etcd unreachable: the cached configuration, if any.
    async fn start_from_cache(&self) {
        let Some(path) = &self.cache_file else {
            tracing::warn!(node = %self.node, "no configuration yet: etcd is unreachable and no `cache_file` is set; answering 503 until etcd is back");
            return;
        };
        let cached = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        let Some(cached) = cached else {
            tracing::warn!(node = %self.node, file = %path.display(), "no configuration yet: etcd is unreachable and the cache file is missing or unreadable; answering 503 until etcd is back");
            return;
        };
        let revision = cached["revision"].as_i64().unwrap_or(0);
        let objects: Objects = cached["objects"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, entry)| {
                let rev = entry["mod_revision"].as_i64().unwrap_or(0);
                (
                    key.clone(),
                    (rev, serde_json::to_vec(&entry["value"]).expect("JSON")),
                )
            })
            .collect();
        {
            let mut state = self.state.lock().expect("store state");
            state.objects = objects;
            state.seen = revision;
        }
        tracing::warn!(node = %self.node, revision, file = %path.display(), "etcd is unreachable: serving the configuration cached at start-up until it is back");
        self.apply_current(revision, "cache file").await;
    }
}

/// The watch's start revision was compacted: read everything again.
struct Compacted;

impl ConfigStore for EtcdStore {
    fn write(&self, changes: AdminChanges) -> StoreFuture<'_, Result<(), EditError>> {
        Box::pin(async move {
            let (writes, compares) = {
                let state = self.state.lock().expect("store state");
                // Compared with what this node serves: the edit was made to
                // that (the node's reload lock keeps it from changing until
                // the write is done).
                let base = &state.applied_objects;
                let last_seq = base
                    .iter()
                    .filter(|(key, _)| key.starts_with(&format!("{}/routes/", self.prefix)))
                    .map(|(_, (_, bytes))| layout::route_seq(bytes))
                    .max()
                    .unwrap_or(0);
                let writes = layout::writes(&self.prefix, &changes, base, last_seq);
                let compares: Vec<Compare> = writes
                    .iter()
                    .map(|w| match base.get(&w.key) {
                        Some((revision, _)) => {
                            Compare::mod_revision(w.key.clone(), CompareOp::Equal, *revision)
                        }
                        None => Compare::version(w.key.clone(), CompareOp::Equal, 0),
                    })
                    .collect();
                (writes, compares)
            };
            let ops: Vec<TxnOp> = writes
                .iter()
                .map(|w| match &w.value {
                    Some(value) => TxnOp::put(w.key.clone(), value.clone(), None),
                    None => TxnOp::delete(w.key.clone(), None),
                })
                .collect();
            let unavailable = |e: &dyn std::fmt::Display| {
                EditError::StoreUnavailable(format!(
                    "the change was not written: etcd ({}) is unavailable: {e}",
                    self.endpoints.join(", ")
                ))
            };
            let mut client = self.client().await.map_err(|e| unavailable(&e))?;
            let response = match client.txn(Txn::new().when(compares).and_then(ops)).await {
                Ok(response) => response,
                Err(e) => {
                    self.disconnect().await;
                    return Err(unavailable(&e));
                }
            };
            if !response.succeeded() {
                let keys: Vec<&str> = writes.iter().map(|w| w.key.as_str()).collect();
                return Err(EditError::Conflict(format!(
                    "{} changed in etcd since this node read it (another writer got there first); read it again and retry",
                    keys.join(", ")
                )));
            }
            let revision = response.header().map_or(0, |h| h.revision());
            let mut guard = self.state.lock().expect("store state");
            let state = &mut *guard;
            for w in writes {
                for objects in [&mut state.objects, &mut state.applied_objects] {
                    match &w.value {
                        Some(value) => {
                            objects.insert(w.key.clone(), (revision, value.clone()));
                        }
                        None => {
                            objects.remove(&w.key);
                        }
                    }
                }
            }
            state.seen = state.seen.max(revision);
            state.applied = revision;
            self.changed.notify_one();
            Ok(())
        })
    }

    fn reload(&self) -> StoreFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            self.load().await.map_err(|e| format!("{e:#}"))?;
            let state = self.state.lock().expect("store state");
            match &state.last_error {
                Some(reason) => Err(reason.clone()),
                None => Ok(self
                    .live
                    .upgrade()
                    .map_or(0, |live| live.status().generation)),
            }
        })
    }

    fn cluster(&self) -> StoreFuture<'_, Value> {
        Box::pin(async move { crate::nodes::cluster_view(self).await })
    }

    fn describe(&self) -> Value {
        let state = self.state.lock().expect("store state");
        json!({
            "etcd": self.endpoints,
            "prefix": self.prefix,
            "node": self.node,
            "revision": state.applied,
            "revision_seen": state.seen,
            "connected": state.connected,
            "last_error": state.last_error,
        })
    }

    fn revision(&self) -> i64 {
        self.state.lock().expect("store state").applied
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}
