//! A node's configuration in etcd: loaded whole, then followed with a watch
//! from the revision it was loaded at; every change goes through the same
//! atomic build-and-swap as a file reload ([`LiveGateway::apply`]), so a
//! change that does not build on this node is rejected here (and reported in
//! `/cluster`) while the previous version keeps serving. The admin API's
//! writes go to etcd as one transaction that compares each key's revision
//! with the one this node last saw, so two admins cannot lose each other's
//! change (the second gets 409).
//!
//! An admin edit is made to the configuration etcd holds as this node last
//! read it (not only what it serves: when etcd's configuration does not
//! build here, the edit is checked against it, and the refusal says so),
//! and written with compare-and-swap against those objects' revisions.
//!
//! When etcd is unreachable the node keeps serving what it has, and
//! reconnects with backoff (with jitter, so a cluster's nodes do not
//! reconnect in lock-step); it resumes its watch from the last revision it
//! saw, or reloads whole when etcd compacted that revision away. A node that
//! starts while etcd is down, or finds there a configuration it cannot build,
//! serves from `cache_file` (the configuration it last applied, whatever
//! made the change) if it has one, and otherwise answers 503 (and `/readyz`
//! 503) with the reason until it has a configuration.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{Client, Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, WatchOptions};
use serde_json::{json, Value};
use wasmgate_config::AdminChanges;
use wasmgate_config::{ConfigSource, GatewayConfig};
use wasmgate_gateway::config_store::{ConfigStore, StoreFuture};
use wasmgate_gateway::reload::EditError;
use wasmgate_gateway::LiveGateway;

use crate::access::EtcdAccess;
use crate::layout::{self, Objects};
use crate::seal;
use wasmgate_base::backoff::Backoff;

/// Backoff between attempts to reach etcd: from about 100 ms, doubling, to
/// about 5 s (with jitter).
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Watch events arriving this close together are applied as one change
/// (a `config push` is many keys in one revision, but a script's edits may
/// come as several).
const SETTLE: Duration = Duration::from_millis(20);

pub struct EtcdStore {
    pub(crate) endpoints: Vec<String>,
    /// How etcd is reached (TLS, user) and the keys sealing its objects.
    access: EtcdAccess,
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
    /// The objects the admin edit being made is based on (set by
    /// `latest`, taken by `write`; both run under the node's reload lock).
    pub edit_base: Option<Objects>,
    /// The latest etcd revision seen (loaded, watched or written): where a
    /// watch resumes.
    pub seen: i64,
    /// The latest revision a watch message brought (a node's own write is
    /// seen here once etcd echoes it back).
    pub watched: i64,
    /// The revision of the configuration this node serves (the newest mod
    /// revision of its objects, `layout::config_revision`; 0: none yet).
    pub applied: i64,
    pub connected: bool,
    /// Why the last change was rejected here, or etcd could not be reached.
    pub last_error: Option<String>,
    /// Why the configuration etcd holds (as last read) does not build on
    /// this node, with its revision; None when it serves it.
    pub rejected: Option<(i64, String)>,
    /// The lease the node's registration lives under (revoked on a clean stop).
    pub lease: Option<i64>,
    /// Set when the node stops: it does not register again.
    pub leaving: bool,
    pub started_at_ms: u64,
}

impl EtcdStore {
    /// A store for the node whose own file is `local` (with its `config`).
    /// `file` is the node's file: `etcd_tls`, `etcd_auth` and the
    /// encryption keys' paths are relative to its directory.
    pub fn new(
        local: GatewayConfig,
        file: &std::path::Path,
        live: &Arc<LiveGateway>,
    ) -> Result<Arc<EtcdStore>> {
        let source: ConfigSource = local
            .config
            .clone()
            .context("the node's file has no `config` section")?;
        let node = source.node_name.clone().unwrap_or_else(|| {
            local
                .all_listeners()
                .first()
                .map(|l| l.address.clone())
                .unwrap_or_default()
        });
        let base = wasmgate_base::paths::config_dir(file);
        let access = EtcdAccess::new(&source, base)?;
        Ok(Arc::new(EtcdStore {
            endpoints: source.etcd.clone(),
            access,
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
                edit_base: None,
                seen: 0,
                watched: 0,
                applied: 0,
                connected: false,
                last_error: None,
                rejected: None,
                lease: None,
                leaving: false,
                started_at_ms: wasmgate_base::unix_ms(),
            }),
        }))
    }

    /// Follows etcd for as long as the node lives: load, watch, apply;
    /// reconnecting with backoff when etcd goes away.
    pub async fn run(self: Arc<Self>) {
        let mut backoff = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
        loop {
            if self.live.upgrade().is_none() {
                return;
            }
            let loaded = self.load().await;
            if let Err(e) = &loaded {
                let reason = format!("cannot read the configuration from etcd: {e:#}");
                self.failed(reason.clone());
                self.fall_back_to_cache(&reason).await;
            }
            if loaded.is_ok() {
                backoff.reset();
                // Follows until the watch breaks, then resumes from the last
                // revision seen; reloads whole when that was compacted away.
                loop {
                    match self.watch().await {
                        Ok(Compacted) => break,
                        Err(e) => {
                            self.failed(format!("lost etcd: {e:#}"));
                            tokio::time::sleep(backoff.next_delay()).await;
                        }
                    }
                }
                continue;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// A connected client (connecting if needed).
    pub(crate) async fn client(&self) -> Result<Client> {
        let mut client = self.client.lock().await;
        if let Some(client) = &*client {
            return Ok(client.clone());
        }
        let connected = self
            .access
            .connect(Duration::from_secs(2), Duration::from_secs(5))
            .await?;
        *client = Some(connected.clone());
        Ok(connected)
    }

    /// The configuration the objects (as stored in etcd) make.
    fn merge(&self, objects: &Objects) -> Result<GatewayConfig> {
        let opened = seal::open_all(self.access.keyring.as_ref(), objects)?;
        layout::merge(&self.local, &self.prefix, &opened)
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
        self.apply_current("etcd: load").await;
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
                self.apply_current("etcd: watch").await;
            }
        }
    }

    /// Folds a watch message's events into the objects; whether any was a
    /// configuration key.
    fn absorb(&self, message: &etcd_client::WatchResponse) -> bool {
        let mut state = self.state.lock().expect("store state");
        if let Some(header) = message.header() {
            state.seen = state.seen.max(header.revision());
            state.watched = state.watched.max(header.revision());
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

    /// Builds and serves the configuration the objects make, unless it is
    /// what the node serves already (the echo of its own write).
    async fn apply_current(&self, trigger: &str) {
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
                state.last_error = None;
                state.rejected = None;
                drop(state);
                self.changed.notify_one();
                return;
            }
            state.objects.clone()
        };
        let revision = layout::config_revision(&objects);
        let merged = self.merge(&objects);
        let result = match merged {
            Ok(config) if live.is_ready() && config == *live.current().config() => Ok(()),
            Ok(config) => live
                .apply(config, &format!("{trigger} (revision {revision})"))
                .await
                .map(drop),
            Err(e) => Err(format!("{e:#}")),
        };
        let rejected = {
            let mut state = self.state.lock().expect("store state");
            match &result {
                Ok(()) => {
                    state.applied = revision;
                    state.applied_objects = objects;
                    state.last_error = None;
                    state.rejected = None;
                }
                Err(reason) => {
                    state.last_error = Some(format!("revision {revision} rejected: {reason}"));
                    state.rejected = Some((revision, reason.clone()));
                }
            }
            result.err()
        };
        self.changed.notify_one();
        match rejected {
            None => self.write_cache(),
            Some(reason) => {
                tracing::error!(node = %self.node, revision, "configuration from etcd rejected; the previous version keeps serving:\n{reason}");
                let why = format!(
                    "the configuration in etcd (revision {revision}) does not build on this node: {reason}"
                );
                self.fall_back_to_cache(&why).await;
            }
        }
    }

    /// Keeps the configuration this node serves, to start from it while
    /// etcd is down (or holds one it cannot build). Written beside the file
    /// and renamed over it, so a crash never leaves half of it.
    fn write_cache(&self) {
        let Some(path) = &self.cache_file else { return };
        let (revision, entries) = {
            let state = self.state.lock().expect("store state");
            let entries: serde_json::Map<String, Value> = state
                .applied_objects
                .iter()
                .map(|(key, (rev, bytes))| {
                    let value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
                    (key.clone(), json!({ "mod_revision": rev, "value": value }))
                })
                .collect();
            (state.applied, entries)
        };
        let text = json!({ "prefix": self.prefix, "revision": revision, "objects": entries });
        let bytes = serde_json::to_vec_pretty(&text).expect("JSON");
        if let Err(e) = wasmgate_base::fs::write_atomically(path, &bytes) {
            tracing::warn!(file = %path.display(), error = %e, "cannot write the configuration cache");
        }
    }

    /// A node with nothing to serve yet (etcd unreachable at start-up, or
    /// holding a configuration this node cannot build) serves the cached
    /// configuration if it has one; otherwise it answers 503 with `why`.
    async fn fall_back_to_cache(&self, why: &str) {
        let Some(live) = self.live.upgrade() else {
            return;
        };
        if live.is_ready() {
            return;
        }
        let Some(path) = &self.cache_file else {
            tracing::warn!(node = %self.node, "no configuration to serve: {why}; no `cache_file` is set, so the node answers 503 until it has one");
            live.set_waiting(why);
            return;
        };
        let cached = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        let Some(cached) = cached else {
            tracing::warn!(node = %self.node, file = %path.display(), "no configuration to serve: {why}; the cache file is missing or unreadable, so the node answers 503 until it has one");
            live.set_waiting(&format!(
                "{why}; the cache file {} is missing or unreadable",
                path.display()
            ));
            return;
        };
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
        let revision = layout::config_revision(&objects);
        tracing::warn!(node = %self.node, revision, file = %path.display(), "{why}: serving the configuration cached in the cache file until etcd gives one this node can build");
        let applied = match self.merge(&objects) {
            Ok(config) => live
                .apply(config, &format!("cache file (revision {revision})"))
                .await
                .map(drop),
            Err(e) => Err(format!("{e:#}")),
        };
        match applied {
            Ok(()) => {
                // Served, but not what etcd holds: `objects` stays etcd's,
                // so the next change there is built again.
                let mut state = self.state.lock().expect("store state");
                state.applied = revision;
                state.applied_objects = objects;
                drop(state);
                self.changed.notify_one();
            }
            Err(reason) => {
                tracing::error!(node = %self.node, file = %path.display(), "the cached configuration does not build either:\n{reason}");
                live.set_waiting(&format!(
                    "{why}; the cached configuration does not build either: {reason}"
                ));
            }
        }
    }
}

/// The watch's start revision was compacted: read everything again.
struct Compacted;

impl ConfigStore for EtcdStore {
    fn write(&self, changes: AdminChanges) -> StoreFuture<'_, Result<(), EditError>> {
        Box::pin(async move {
            let (mut writes, compares, base) = {
                let mut state = self.state.lock().expect("store state");
                // Compared with what the edit was made to (`latest`): the
                // node's reload lock keeps another edit from coming between.
                let base = state
                    .edit_base
                    .take()
                    .unwrap_or_else(|| state.applied_objects.clone());
                let opened = seal::open_all(self.access.keyring.as_ref(), &base).map_err(|e| {
                    EditError::Invalid(format!("the configuration in etcd cannot be read: {e:#}"))
                })?;
                let last_seq = opened
                    .iter()
                    .filter(|(key, _)| key.starts_with(&format!("{}/routes/", self.prefix)))
                    .map(|(_, (_, bytes))| layout::route_seq(bytes))
                    .max()
                    .unwrap_or(0);
                let mut writes = layout::writes(&self.prefix, &changes, &opened, last_seq);
                // Stored as etcd will hold them: sealed when the node has keys.
                for w in &mut writes {
                    if let Some(value) = w.value.take() {
                        w.value = Some(seal::stored(self.access.keyring.as_ref(), &w.key, value));
                    }
                }
                let compares: Vec<Compare> = writes
                    .iter()
                    .map(|w| match base.get(&w.key) {
                        Some((revision, _)) => {
                            Compare::mod_revision(w.key.clone(), CompareOp::Equal, *revision)
                        }
                        None => Compare::version(w.key.clone(), CompareOp::Equal, 0),
                    })
                    .collect();
                (writes, compares, base.clone())
            };
            // Every writer writes it, so it is not compared: two edits of
            // different entries both succeed.
            let changed_key = layout::changed_key(&self.prefix);
            let changed = layout::changed_value(&format!("admin API on {}", self.node));
            writes.push(layout::Write {
                value: Some(seal::stored(
                    self.access.keyring.as_ref(),
                    &changed_key,
                    changed,
                )),
                key: changed_key,
            });
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
                let changed = layout::changed_key(&self.prefix);
                let keys: Vec<&str> = writes
                    .iter()
                    .map(|w| w.key.as_str())
                    .filter(|key| *key != changed)
                    .collect();
                return Err(EditError::Conflict(format!(
                    "{} changed in etcd since this node read it (another writer got there first); read it again and retry",
                    keys.join(", ")
                )));
            }
            let revision = response.header().map_or(0, |h| h.revision());
            let mut guard = self.state.lock().expect("store state");
            let state = &mut *guard;
            // What the node now serves is the base with the writes; what
            // etcd holds, as far as it knows, its objects with them.
            state.applied_objects = base;
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
            state.applied = layout::config_revision(&state.applied_objects);
            state.rejected = None;
            drop(guard);
            self.changed.notify_one();
            self.write_cache();
            Ok(())
        })
    }

    fn latest(&self) -> Result<GatewayConfig, EditError> {
        let mut state = self.state.lock().expect("store state");
        let config = self.merge(&state.objects).map_err(|e| {
            EditError::Invalid(format!(
                "the configuration in etcd (revision {}) cannot be read: {e:#}; publish a valid one with `wasmgate config push`",
                layout::config_revision(&state.objects)
            ))
        })?;
        state.edit_base = Some(state.objects.clone());
        Ok(config)
    }

    fn rejected(&self) -> Option<String> {
        let state = self.state.lock().expect("store state");
        state.rejected.as_ref().map(|(revision, reason)| {
            format!("the configuration in etcd (revision {revision}) was already rejected by this node: {reason}")
        })
    }

    fn leave(&self) -> StoreFuture<'_, ()> {
        Box::pin(crate::nodes::leave(self))
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
            "revision_watched": state.watched,
            "connected": state.connected,
            "last_error": state.last_error,
        })
    }

    fn revision(&self) -> i64 {
        self.state.lock().expect("store state").applied
    }
}
