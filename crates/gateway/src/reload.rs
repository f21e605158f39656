//! Hot reload. Requests are served by whatever [`Gateway`] is current; a
//! reload reads the configuration file again, loads its plugins (compiling
//! them off the serving threads) and builds a whole new gateway beside the
//! running one. Only if every part of it builds is it swapped in, atomically:
//! a request holds the gateway it started on until it ends, so in-flight
//! requests finish on the old version while new ones get the new one, and
//! the listeners never stop. A failed reload changes nothing but the
//! status, which names the file, field and reason.
//!
//! The old gateway is freed when its last request ends: its instances and
//! modules with it, its root contexts stop, its health probes end.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use hyper::{Request, Response};
use serde::Serialize;
use wasmgate_runtime::Runtime;
use wasmgate_transport::body::RequestBody;

use crate::config_store::ConfigStore;
pub use crate::config_store::EditError;
use crate::gateway::{plugin_path, Gateway};
use wasmgate_config::GatewayConfig;
use wasmgate_config::{admin_file_path, AdminChanges};
use wasmgate_transport::body::Body;
use wasmgate_transport::listener::{Connection, Handler};

/// The gateway currently serving, and how to build the next one.
pub struct LiveGateway {
    current: ArcSwap<Gateway>,
    file: PathBuf,
    runtime: Runtime,
    status: Mutex<ReloadStatus>,
    /// One reload at a time: a file change and a SIGHUP arriving together
    /// build once after the other, never interleaved.
    reloading: tokio::sync::Mutex<()>,
    /// The watched files as the last reload or update saw them: the watcher
    /// reloads when they differ (so the admin API's own writes do not
    /// trigger a second reload).
    seen: Mutex<Fingerprint>,
    /// Where admin changes are kept (file mode with `admin_writes`).
    admin_file: PathBuf,
    last_change: Mutex<Option<AdminChange>>,
    /// A shared store (etcd) the configuration comes from instead of the
    /// file; set once at start-up (see `config_store.rs`).
    store: OnceLock<Arc<dyn ConfigStore>>,
    /// False while the node has no configuration yet (a store it could not
    /// reach at start, or holding one it cannot build, and no cached copy):
    /// requests and `/readyz` are answered 503 with `waiting`.
    ready: AtomicBool,
    /// Set once no component is compiling (see [`LiveGateway::is_warm`]).
    warm: AtomicBool,
    /// Why the node has no configuration yet.
    waiting: Mutex<String>,
    /// The file watcher's period in ms (0: not watching) and polls so far,
    /// for `/status`: that it looked is observable, not only what it did.
    watch_interval_ms: AtomicU64,
    watch_polls: AtomicU64,
}

/// One admin write, for the audit log and `/status`.
#[derive(Clone, Debug, Serialize)]
pub struct AdminChange {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// `PUT route api`, `DELETE plugin auth`, `POST /reload`.
    pub action: String,
    /// Content hashes of the entry before and after (none: absent).
    pub before: Option<String>,
    pub after: Option<String>,
    /// The client's address.
    pub peer: String,
    /// Whether the request carried the admin token.
    pub token: bool,
    /// `applied` (with the generation), or why not.
    pub outcome: String,
}

impl AdminChange {
    pub fn new(action: String, peer: std::net::SocketAddr, token: bool) -> AdminChange {
        AdminChange {
            at_ms: wasmgate_base::unix_ms(),
            action,
            before: None,
            after: None,
            peer: peer.to_string(),
            token,
            outcome: String::new(),
        }
    }
}

/// The next configuration, and the admin change it makes, if it is one.
struct Proposal {
    config: GatewayConfig,
    changes: Option<(AdminChanges, Persist)>,
}

impl Proposal {
    /// A configuration read whole (a file, a store): nothing to keep.
    fn plain(config: GatewayConfig) -> Proposal {
        Proposal {
            config,
            changes: None,
        }
    }
}

/// Where an admin change is kept once it builds.
enum Persist {
    AdminFile,
    Store,
}

/// What the admin API reports about reloads.
#[derive(Clone, Debug, Serialize)]
pub struct ReloadStatus {
    /// 1 for the gateway started with, +1 per successful reload.
    pub generation: u64,
    /// When the current generation was swapped in (ms since the epoch).
    pub loaded_at_ms: u64,
    pub reloads: u64,
    pub failed_reloads: u64,
    /// Why the last reload was rejected, with what triggered it; cleared
    /// when a later reload succeeds (`failed_reloads` still counts it).
    pub last_error: Option<String>,
    /// When that rejection happened (ms since the epoch).
    pub last_error_at_ms: Option<u64>,
    /// The serving generation's filters (one per route and plugin)...
    pub filters: usize,
    /// ... and how many of them it kept from the generation before
    /// instead of starting them again (`build/routes.rs`).
    pub filters_kept: usize,
}

impl LiveGateway {
    pub fn new(gateway: Gateway, file: &Path, runtime: Runtime) -> LiveGateway {
        crate::build::plugins::warn_unimplemented_imports(&gateway);
        let filters = gateway.filters.len();
        let live = LiveGateway {
            current: ArcSwap::from_pointee(gateway),
            file: file.to_path_buf(),
            runtime,
            status: Mutex::new(ReloadStatus {
                generation: 1,
                loaded_at_ms: wasmgate_base::unix_ms(),
                reloads: 0,
                failed_reloads: 0,
                last_error: None,
                last_error_at_ms: None,
                filters,
                filters_kept: 0,
            }),
            reloading: tokio::sync::Mutex::new(()),
            seen: Mutex::new(Vec::new()),
            admin_file: admin_file_path(file),
            last_change: Mutex::new(None),
            store: OnceLock::new(),
            ready: AtomicBool::new(true),
            warm: AtomicBool::new(false),
            waiting: Mutex::new(String::new()),
            watch_interval_ms: AtomicU64::new(0),
            watch_polls: AtomicU64::new(0),
        };
        *live.seen.lock().expect("seen lock") = fingerprint(&live.watched_files());
        live
    }

    /// The gateway new requests go to.
    pub fn current(&self) -> Arc<Gateway> {
        self.current.load_full()
    }

    /// The configuration file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Where admin changes are kept when `admin_writes` is on.
    pub fn admin_file(&self) -> &Path {
        &self.admin_file
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn status(&self) -> ReloadStatus {
        self.status.lock().expect("status lock").clone()
    }

    /// Makes `store` the source of the configuration (once, at start-up).
    pub fn set_store(&self, store: Arc<dyn ConfigStore>) {
        if self.store.set(store).is_err() {
            panic!("a node's configuration store is set once");
        }
    }

    pub fn store(&self) -> Option<&Arc<dyn ConfigStore>> {
        self.store.get()
    }

    /// Whether the node serves a configuration (false while it waits for
    /// its store at start-up).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Whether every component of the node's first configuration has
    /// compiled and every filter started (`build/background.rs`): `/readyz`
    /// waits for it, so an orchestrator sends no traffic to a node that
    /// would answer some of it 503. Once warm a node stays so: a reload
    /// that leaves a component compiling or a filter starting does not take
    /// a serving node out of its load balancer.
    pub fn is_warm(&self) -> bool {
        self.warm.load(Ordering::Relaxed)
            || (self.current().compiling.is_empty()
                && self.current().filters_starting.is_empty()
                && {
                    self.warm.store(true, Ordering::Relaxed);
                    true
                })
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Marks the node as having no configuration to serve, and says why:
    /// requests and `/readyz` get 503 with the reason until one is applied.
    pub fn set_waiting(&self, why: &str) {
        *self.waiting.lock().expect("waiting lock") = why.to_string();
        self.set_ready(false);
    }

    /// The file watcher, for `/status`: its period and how often it has
    /// looked at the files; `None` when the node does not watch them
    /// (`--no-watch`, or its configuration is in a store).
    pub fn watch_status(&self) -> Option<serde_json::Value> {
        let interval_ms = self.watch_interval_ms.load(Ordering::Relaxed);
        (interval_ms > 0).then(|| {
            serde_json::json!({
                "interval_ms": interval_ms,
                "polls": self.watch_polls.load(Ordering::Relaxed),
            })
        })
    }

    /// Why the node has no configuration yet (when not ready).
    pub fn waiting(&self) -> String {
        self.waiting.lock().expect("waiting lock").clone()
    }

    /// Builds `config` and swaps it in, as a reload does (what a store
    /// applies). Returns the new generation, or every reason it was
    /// rejected (the running gateway is untouched then).
    pub async fn apply(&self, config: GatewayConfig, trigger: &str) -> Result<u64, String> {
        self.install(trigger, |_| Ok(Proposal::plain(config)))
            .await
            .map_err(EditError::into_reason)
    }

    /// Builds the gateway from the file as it is now and swaps it in (with a
    /// store: reads the store again). Returns the new generation, or every
    /// reason the file was rejected (the running gateway is untouched then).
    pub async fn reload(&self, trigger: &str) -> Result<u64, String> {
        if let Some(store) = self.store.get() {
            return store.reload().await;
        }
        self.install(trigger, |live| {
            let config = GatewayConfig::load(&live.file)
                .map_err(|errors| EditError::Invalid(errors.to_string()))?;
            live.warn_about_restart_only_changes(&config);
            Ok(Proposal::plain(config))
        })
        .await
        .map_err(EditError::into_reason)
    }

    /// Builds the configuration it serves again each time a component that
    /// a build left compiling is done (`build/background.rs`), for as long
    /// as the node runs. The same configuration, not the store's or the
    /// file's latest: a store skips a configuration equal to the one
    /// served, and a changed file is the watcher's to reload.
    pub async fn reload_when_compiled(self: Arc<Self>) {
        loop {
            crate::build::background::COMPILED.notified().await;
            let config = self.current().config().clone();
            if let Err(e) = self
                .apply(config, "a component's compile or a filter's start ended")
                .await
            {
                tracing::error!("the reload after a component's compile or a filter's start failed; the node keeps serving what it had:\n{e}");
            }
        }
    }

    /// Changes the running configuration with `edit` (the admin API's
    /// writes) and swaps the result in, as a reload does. In file mode the
    /// operator's file as it is now, with the admin file's changes applied,
    /// is edited, and what then differs from the operator's file is written
    /// to the admin file (see `wasmgate_config::admin_changes`); the operator's file is not
    /// written. With a store, the configuration in the store is edited and
    /// the change written to it with compare-and-swap (see `config_store.rs`).
    /// A rejected change touches nothing.
    pub async fn update(
        &self,
        trigger: &str,
        edit: impl FnOnce(&mut GatewayConfig) -> Result<(), EditError>,
    ) -> Result<u64, EditError> {
        self.install(trigger, |live| {
            let (base, mut config, persist) = match live.store.get() {
                Some(store) => {
                    let base = store.latest()?;
                    (base.clone(), base, Persist::Store)
                }
                None => {
                    let base = live.admin_base()?;
                    let mut config = base.clone();
                    AdminChanges::read(&live.admin_file)
                        .map_err(|(field, message)| {
                            EditError::Invalid(format!(
                                "{}: {field}: {message}",
                                live.admin_file.display()
                            ))
                        })?
                        .apply_to(&mut config);
                    (base, config, Persist::AdminFile)
                }
            };
            edit(&mut config)?;
            Ok(Proposal {
                changes: Some((AdminChanges::between(&base, &config), persist)),
                config,
            })
        })
        .await
        .map_err(|e| match (e, self.store.get().and_then(|s| s.rejected())) {
            // The store's configuration did not build here before this
            // edit either: say so, and what fixes it, with the reasons.
            (EditError::Invalid(reason), Some(rejected)) => EditError::Invalid(format!(
                "{reason}\n{rejected}; the change was checked against it: publish a valid configuration with `wasmgate config push`, or fix the entries named above through this API"
            )),
            (e, _) => e,
        })
    }

    /// Where the entry a problem names comes from: the admin file when the
    /// admin API put it there, etcd with a store, else the operator's file.
    fn origin(&self, field: &str, changes: Option<&(AdminChanges, Persist)>) -> String {
        match changes {
            Some((_, Persist::Store)) => "etcd".to_string(),
            Some((changes, Persist::AdminFile)) if changes.holds(field) => {
                self.admin_file.display().to_string()
            }
            _ => self.file.display().to_string(),
        }
    }

    /// The operator's file, which admin changes are made against (file
    /// mode), if it takes them.
    fn admin_base(&self) -> Result<GatewayConfig, EditError> {
        let base =
            GatewayConfig::read_file(&self.file).map_err(|e| EditError::Invalid(e.to_string()))?;
        if !base.admin_writes {
            return Err(EditError::WritesOff(format!(
                "the admin API does not change this gateway's configuration: {} is the source of truth (edit it, then POST /reload); set `admin_writes: true` in it to keep admin changes in {} beside it",
                self.file.display(),
                self.admin_file.display()
            )));
        }
        Ok(base)
    }

    /// The one way the serving configuration changes, whatever asked for it
    /// (the file watcher, SIGHUP, `POST /reload`, an admin write, a store's
    /// watch): one change at a time, `propose` reads or makes the next
    /// configuration, which is checked (`wasmgate check`'s rules) and built
    /// whole beside the running gateway; an admin change is then kept (the
    /// admin file, or the store), and only then is the new gateway swapped
    /// in. A failure at any step leaves the running gateway, its services
    /// and pools as they were, and is recorded in the status.
    async fn install(
        &self,
        trigger: &str,
        propose: impl FnOnce(&Self) -> Result<Proposal, EditError>,
    ) -> Result<u64, EditError> {
        let _one_at_a_time = self.reloading.lock().await;
        let started = Instant::now();
        let stamp = self.runtime.module_load_stamp();
        let outcome = self.propose_and_build(propose).await;
        let outcome = match outcome {
            Ok((gateway, changes)) => match changes {
                Some((changes, Persist::AdminFile)) => changes
                    .write(&self.admin_file)
                    .map_err(|e| {
                        EditError::Invalid(format!("writing {}: {e}", self.admin_file.display()))
                    })
                    .map(|()| gateway),
                Some((mut changes, Persist::Store)) => {
                    let store = self.store.get().expect("Persist::Store comes with a store");
                    // Nodes get plugins pinned to what their tags resolved
                    // to here; this node serves the same.
                    let mut gateway = gateway;
                    gateway.pin_images(&mut changes.plugins);
                    let mut serving = std::mem::take(&mut gateway.config.plugins);
                    gateway.pin_images(&mut serving);
                    gateway.config.plugins = serving;
                    store.write(changes).await.map(|()| gateway)
                }
                None => Ok(gateway),
            },
            Err(e) => Err(e),
        };
        let result = match outcome {
            Ok(gateway) => {
                let generation = self.swap(gateway, trigger, started, stamp);
                self.set_ready(true);
                Ok(generation)
            }
            Err(EditError::Invalid(reason)) => {
                Err(EditError::Invalid(self.reject(trigger, reason)))
            }
            Err(other) => Err(other),
        };
        if self.store.get().is_none() {
            *self.seen.lock().expect("seen lock") = fingerprint(&self.watched_files());
        }
        result
    }

    async fn propose_and_build(
        &self,
        propose: impl FnOnce(&Self) -> Result<Proposal, EditError>,
    ) -> Result<(Gateway, Option<(AdminChanges, Persist)>), EditError> {
        let Proposal { config, changes } = propose(self)?;
        let problems = config.check();
        if !problems.is_empty() {
            let reason = problems
                .iter()
                .map(|(field, message)| {
                    format!(
                        "{}: {field}: {message}",
                        self.origin(field, changes.as_ref())
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(EditError::Invalid(reason));
        }
        let running = self.current();
        let gateway = Gateway::build(config, &self.file, &self.runtime, Some(&running))
            .await
            .map_err(|e| EditError::Invalid(e.to_string()))?;
        Ok((gateway, changes))
    }

    /// Records an admin change (or an attempt) for `/status`, and logs it.
    pub fn record_change(&self, change: AdminChange) {
        tracing::info!(
            action = %change.action,
            before = change.before.as_deref().unwrap_or("-"),
            after = change.after.as_deref().unwrap_or("-"),
            peer = %change.peer,
            token = change.token,
            outcome = %change.outcome,
            "admin change"
        );
        *self.last_change.lock().expect("last change lock") = Some(change);
    }

    /// The last admin change or attempt.
    pub fn last_change(&self) -> Option<AdminChange> {
        self.last_change.lock().expect("last change lock").clone()
    }

    fn swap(&self, gateway: Gateway, trigger: &str, started: Instant, stamp: u64) -> u64 {
        crate::build::plugins::warn_unimplemented_imports(&gateway);
        gateway.take_over_filter_calls();
        crate::build::background::forget_started_but(&gateway.filters_starting);
        let (filters, filters_kept) = (gateway.filters.len(), gateway.filters_kept);
        self.current.store(Arc::new(gateway));
        // Modules only the old version used go when its last request ends.
        self.runtime.forget_modules_unused_since(stamp);
        let mut status = self.status.lock().expect("status lock");
        status.generation += 1;
        status.reloads += 1;
        status.loaded_at_ms = wasmgate_base::unix_ms();
        status.last_error = None;
        status.last_error_at_ms = None;
        (status.filters, status.filters_kept) = (filters, filters_kept);
        tracing::info!(
            trigger,
            generation = status.generation,
            took_ms = started.elapsed().as_millis() as u64,
            filters,
            filters_kept,
            "configuration reloaded"
        );
        status.generation
    }

    /// Records a rejected change; returns the reason.
    fn reject(&self, trigger: &str, reason: String) -> String {
        let mut status = self.status.lock().expect("status lock");
        status.failed_reloads += 1;
        status.last_error = Some(format!("{trigger}: {reason}"));
        status.last_error_at_ms = Some(wasmgate_base::unix_ms());
        tracing::error!(
            trigger,
            generation = status.generation,
            "reload rejected; the running configuration keeps serving:\n{reason}"
        );
        reason
    }

    /// The listeners (and how they treat connections), the admin and probes
    /// addresses and the thread counts are fixed at start-up.
    fn warn_about_restart_only_changes(&self, new: &GatewayConfig) {
        let current = self.current();
        let old = current.config();
        let fixed = |c: &GatewayConfig| {
            let l = &c.limits;
            (
                (
                    c.all_listeners(),
                    c.admin.clone(),
                    c.probes.clone(),
                    c.access_log.clone(),
                ),
                (l.threads, l.long_call_threads, l.long_call_nice),
                (l.header_read_timeout_ms, l.max_connections),
                (
                    l.http2_idle_timeout_ms,
                    l.http2_keepalive_interval_ms,
                    l.http2_keepalive_timeout_ms,
                ),
                (
                    l.http2_max_concurrent_streams,
                    l.http2_max_header_list_bytes,
                ),
            )
        };
        if fixed(old) != fixed(new) {
            tracing::warn!(
                "`listen`, `listeners`, `admin`, `probes`, `access_log` and these `limits` take effect at the next restart: `threads`, `long_call_threads`, `long_call_nice`, `header_read_timeout_ms`, `max_connections`, `http2_*` (certificates and the other sections are reloaded)"
            );
        }
    }

    /// The files a reload reads: the configuration, its admin file, every
    /// plugin's module, and every certificate, key and client CA file (a
    /// renewed certificate is picked up like a changed module).
    pub fn watched_files(&self) -> Vec<PathBuf> {
        let current = self.current();
        let config = current.config();
        let base = wasmgate_base::paths::config_dir(&self.file);
        let resolve = |f: &PathBuf| wasmgate_base::paths::resolve(base, f);
        let mut files = vec![self.file.clone(), self.admin_file.clone()];
        // Modules pulled from a registry change by a reload, not on disk.
        files.extend(
            (config.plugins.iter())
                .filter(|p| !p.is_oci())
                .map(|p| plugin_path(base, p)),
        );
        files.extend(wasmgate_transport::tls::certificate_files(
            &config.certificates,
            base,
        ));
        files.extend(
            config
                .listeners
                .iter()
                .filter_map(|l| l.tls.as_ref()?.client_ca.as_ref())
                .map(resolve),
        );
        files
    }

    /// Reloads whenever the configuration file or a plugin's module changes
    /// (checked every `interval`). Polling rather than inotify: it also sees
    /// files replaced by rename, on any filesystem.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        self.watch_interval_ms
            .store(interval.as_millis() as u64, Ordering::Relaxed);
        loop {
            tokio::time::sleep(interval).await;
            self.watch_polls.fetch_add(1, Ordering::Relaxed);
            let files = self.watched_files();
            let now = fingerprint(&files);
            if now == *self.seen.lock().expect("seen lock") {
                continue;
            }
            // Let a writer finish: reload once the files stop changing.
            tokio::time::sleep(interval).await;
            let settled = fingerprint(&files);
            if settled != now {
                continue;
            }
            // Records the files of whatever serves next (its plugin list may differ).
            let _ = self.reload("file change").await;
        }
    }
}

impl Handler for LiveGateway {
    fn tls(&self, address: &str) -> Option<wasmgate_transport::tls::TlsAcceptorConfig> {
        self.current.load().tls_acceptor(address)
    }

    async fn handle(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
        if !self.is_ready() {
            return self.not_ready();
        }
        // The request keeps this version alive until it is answered.
        let gateway = self.current.load_full();
        gateway.handle(request, connection).await
    }
}

impl LiveGateway {
    /// 503 while the node has no configuration. Why (etcd's endpoints, a
    /// cache file's path, a build error) is the operator's: the log and
    /// `/status` say it, not the answer to every client.
    fn not_ready(&self) -> Response<Body> {
        let mut response = wasmgate_answers::error_response::simple(
            hyper::StatusCode::SERVICE_UNAVAILABLE,
            "no_configuration",
            "this node has no configuration to serve yet",
        );
        response.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
        response.map(wasmgate_transport::body::boxed)
    }
}

type Fingerprint = Vec<Option<(u64, SystemTime)>>;

/// Size and modification time of each file (None when missing).
fn fingerprint(files: &[PathBuf]) -> Fingerprint {
    files
        .iter()
        .map(|f| {
            let meta = std::fs::metadata(f).ok()?;
            Some((meta.len(), meta.modified().ok()?))
        })
        .collect()
}
