//! A Proxy-Wasm filter plugin: one module, its VM and plugin configuration,
//! and a pool of instances, each with one root context configured with that
//! plugin configuration (so a plugin used on two routes with two
//! configurations is two `FilterPlugin`s). [`FilterPlugin::stream`] leases an
//! instance for one HTTP stream (see `stream.rs`); a plugin that asks for
//! ticks or registers queues also gets a root instance of its own (`root.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use anyhow::{Context, Result};
use wasmgate_runtime::guest_log::LogStream;
use wasmgate_runtime::limits::install_epoch_policy;
use wasmgate_runtime::slow_lane;
use wasmgate_runtime::{CrashReport, InstancePool, PluginStats, PoolConfig, PoolStats, Runtime};
use wasmtime::{
    Extern, Instance, InstancePre, Linker, Module, Store, TypedFunc, WasmParams, WasmResults,
};

use crate::abi::{AbiVersion, MapType};
use crate::batch::{self, Batched};
use crate::callout::{Answer, CallsInFlight};
use crate::exchange::HttpExchange;
use crate::giving::{self, Giving};
use crate::grpc_call::GrpcOutcome;
use crate::grpc_stream::StreamEvent;
use crate::host_env;
use crate::http_call::{CallFailure, HttpCallResponse, HttpCaller};
use crate::limits::{refuse, HostLimits, Limit, RefusalLog};
use crate::redis_call::{REDIS_NETWORK_ERROR, REDIS_OK};
use crate::shared::shared;
use crate::state::{FilterState, GuestMemory};
use crate::stream::FilterStream;

/// Every instance has one root context, with this id (the SDKs look root
/// contexts up by the id the host passes to root callbacks).
pub(crate) const ROOT_CONTEXT_ID: u32 = 1;
/// Deadline of an instance's start-up (its start code, `proxy_on_vm_start`,
/// `proxy_on_configure`) unless the plugin says (`startup_timeout_ms`):
/// generous, as heavy filters take long (Higress's WAF with the OWASP CRS
/// parses its rules for about a minute of CPU at each start).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How a filter plugin is set up.
#[derive(Clone, Debug, Default)]
pub struct FilterConfig {
    /// Name in logs, errors and `plugin_name`.
    pub name: String,
    /// `vm_config.configuration`: what `proxy_on_vm_start` reads.
    pub vm_configuration: Vec<u8>,
    /// The per-route `conf`: what `proxy_on_configure` reads.
    pub plugin_configuration: Vec<u8>,
    /// `plugin_root_id` (default: empty, as Envoy).
    pub root_id: String,
    /// `plugin_vm_id`; instances of one VM id share data and queues.
    pub vm_id: String,
    /// The route the plugin filters (`route_name`, and in its log lines).
    pub route: String,
    /// Where `proxy_http_call` goes; without one every call is refused.
    pub http_caller: Option<Arc<dyn HttpCaller>>,
    /// The services this plugin may reach (Redis through Higress's
    /// `proxy_redis_call`); none by default.
    pub services: wasmgate_services::Grants,
    pub memory_limit: Option<usize>,
    /// Deadline of one callback.
    pub timeout: Option<Duration>,
    /// Deadline of an instance's start-up ([`DEFAULT_STARTUP_TIMEOUT`] when
    /// `None`).
    pub startup_timeout: Option<Duration>,
    pub pool: PoolConfig,
    /// What the host holds for the plugin outside its memory (`limits.rs`).
    pub limits: HostLimits,
}

/// What every instance of a filter plugin shares.
pub(crate) struct FilterShared {
    pub config: FilterConfig,
    pub needs_wasi: bool,
    pub stats: Arc<PluginStats>,
    /// When each limit's refusal was last logged.
    pub refusals: RefusalLog,
}

impl FilterShared {
    fn new(config: FilterConfig, needs_wasi: bool) -> FilterShared {
        let stats = Arc::<PluginStats>::default();
        stats.track_refusals(&Limit::names());
        // The VM id's shared data and queues live as long as a plugin of
        // it does (this one is counted out when dropped, below).
        shared().attach_vm(&config.vm_id);
        FilterShared {
            config,
            needs_wasi,
            stats,
            refusals: RefusalLog::default(),
        }
    }
}

impl Drop for FilterShared {
    fn drop(&mut self) {
        shared().release_vm(&self.config.vm_id);
    }
}

pub struct FilterPlugin {
    pub(crate) shared: Arc<FilterShared>,
    runtime: Runtime,
    linker: Linker<FilterState>,
    module: Module,
    /// Where each of the module's imports comes from, in their order.
    imports: Vec<ImportSource>,
    /// Instantiated before each instance, for the imports it answers.
    giving: InstancePre<FilterState>,
    /// Linked to each instance's exports (`batch.rs`).
    batch: Module,
    abi: AbiVersion,
    pub(crate) pool: InstancePool<FilterInstance>,
    /// Tells the root-context task (if any) that the plugin is gone.
    root_stop: Arc<Notify>,
}

impl Drop for FilterPlugin {
    fn drop(&mut self) {
        self.root_stop.notify_one();
    }
}

pub(crate) struct FilterInstance {
    /// Out (None) only while a callback runs, which takes it along so that it
    /// can move threads (see [`FilterInstance::run`]); a callback whose
    /// request went away takes it down with it, and the lease drops the rest.
    store: Option<Store<FilterState>>,
    /// Shared so a callback can borrow its function while the store is in use.
    pub exports: Arc<Exports>,
    pub next_context_id: u32,
    /// A callback trapped or ran out of time: the instance's memory may be
    /// half-written, so it is never run again.
    pub crashed: bool,
}

/// gRPC status codes `proxy_get_status` reports for a callout.
const GRPC_OK: u32 = 0;
const GRPC_RESOURCE_EXHAUSTED: u32 = crate::grpc_call::RESOURCE_EXHAUSTED;
const GRPC_UNAVAILABLE: u32 = 14;

/// A guest call to make on an instance's store, owning what it needs so
/// that [`FilterInstance::run`] can take it to another thread.
pub(crate) trait Callback: Send + 'static {
    type Output: Send + 'static;
    fn call(
        self,
        store: &mut Store<FilterState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Output>> + Send + '_;
}

/// An export of the instance picked from its shared table at call time, with
/// its arguments: the callbacks every request makes. (Taking a `TypedFunc`
/// along instead would clone it, several atomic reference counts each time.)
pub(crate) struct ExportCall<P: 'static, R: 'static> {
    pub exports: Arc<Exports>,
    pub pick: PickExport<P, R>,
    pub params: P,
}

/// Which export an [`ExportCall`] calls.
pub(crate) type PickExport<P, R> = fn(&Exports) -> Option<&TypedFunc<P, R>>;

impl<P, R> Callback for ExportCall<P, R>
where
    P: WasmParams + Send + Sync + 'static,
    R: WasmResults + Send + Sync + 'static,
{
    type Output = R;
    async fn call(self, store: &mut Store<FilterState>) -> wasmtime::Result<R> {
        match (self.pick)(&self.exports) {
            Some(f) => f.call_async(store, self.params).await,
            None => Err(wasmtime::format_err!("the plugin has no such callback")),
        }
    }
}

/// An export (already cloned) called with its arguments: the callbacks that
/// come rarely (ticks, queues, http call responses).
impl<P, R> Callback for (TypedFunc<P, R>, P)
where
    P: WasmParams + Send + Sync + 'static,
    R: WasmResults + Send + Sync + 'static,
{
    type Output = R;
    fn call(
        self,
        store: &mut Store<FilterState>,
    ) -> impl Future<Output = wasmtime::Result<R>> + Send + '_ {
        let (f, params) = self;
        async move { f.call_async(store, params).await }
    }
}

/// A `FilterInstance` whose store is out means its last callback was dropped
/// mid-call, and the instance is in no state to be used again.
const STORE_OUT: &str = "a filter instance was used after a callback on it was cancelled";

type StreamCallback = Option<TypedFunc<(u32, u32, u32), i32>>;
/// (context, token, header count, body size, trailer count)
type CallResponseCallback = Option<TypedFunc<(u32, u32, u32, u32, u32), ()>>;
/// (root context, token, status, reply size)
type RedisResponseCallback = Option<TypedFunc<(u32, u32, u32, u32), ()>>;
/// (context, token, message size or status code)
type GrpcCallback = Option<TypedFunc<(u32, u32, u32), ()>>;

/// The callbacks, typed once per instance; a missing one is skipped.
pub(crate) struct Exports {
    pub context_create: TypedFunc<(u32, u32), ()>,
    pub request_headers: StreamCallback,
    pub request_body: StreamCallback,
    pub request_trailers: Option<TypedFunc<(u32, u32), i32>>,
    pub response_headers: StreamCallback,
    pub response_body: StreamCallback,
    pub response_trailers: Option<TypedFunc<(u32, u32), i32>>,
    pub log: Option<TypedFunc<u32, ()>>,
    pub done: Option<TypedFunc<u32, i32>>,
    pub delete: Option<TypedFunc<u32, ()>>,
    pub tick: Option<TypedFunc<u32, ()>>,
    pub queue_ready: Option<TypedFunc<(u32, u32), ()>>,
    pub http_call_response: CallResponseCallback,
    pub redis_call_response: RedisResponseCallback,
    pub grpc_receive: GrpcCallback,
    pub grpc_close: GrpcCallback,
    /// (context, token, metadata count): a gRPC stream's metadata.
    pub grpc_initial_metadata: GrpcCallback,
    pub grpc_trailing_metadata: GrpcCallback,
    /// The calls the host makes back to back, each pair or triple as one
    /// guest call (`batch.rs`); `None` if the filter lacks one of them.
    pub batched: Option<Batched>,
}

/// Why a callback failed: the guest trapped, ran out of time or memory, or
/// refused to start.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{0}")]
    Crash(Box<CrashReport>),
    #[error("filter `{plugin}` is unavailable: {reason}")]
    Unavailable { plugin: String, reason: String },
    /// The filter paused the stream with nothing (no call, no tick) that
    /// could ever resume it.
    #[error("filter `{plugin}` paused the stream in {callback} with no http call or tick pending to resume it")]
    Stalled {
        plugin: String,
        callback: &'static str,
    },
    /// The filter kept the stream paused longer than it may (see
    /// `stream.rs`), e.g. dispatching one http call after another.
    #[error(
        "filter `{plugin}` kept the stream paused in {callback} for {limit:?} without resuming it"
    )]
    PausedTooLong {
        plugin: String,
        callback: &'static str,
        limit: Duration,
    },
}

impl FilterPlugin {
    /// Compiles (or loads from the cache) `wasm` and checks that it is a
    /// Proxy-Wasm module this host can link. The first instance is created
    /// and configured now, so a plugin whose `proxy_on_vm_start` or
    /// `proxy_on_configure` fails is refused here.
    pub async fn new(
        runtime: &Runtime,
        wasm: &[u8],
        config: FilterConfig,
    ) -> Result<Arc<FilterPlugin>> {
        let module = runtime.load_module(wasm)?;
        FilterPlugin::from_module(runtime, &module, config).await
    }

    /// [`FilterPlugin::new`] for a module already loaded by `runtime`
    /// (a gateway loads each plugin file once and builds a filter per route).
    pub async fn from_module(
        runtime: &Runtime,
        module: &Module,
        config: FilterConfig,
    ) -> Result<Arc<FilterPlugin>> {
        let abi = AbiVersion::detect(module.exports().map(|e| e.name()))
            .map_err(|reason| anyhow::anyhow!("filter `{}`: {reason}", config.name))?;
        let needs_wasi = wasmgate_runtime::wasi::imports_wasi(module);
        let mut linker = Linker::new(runtime.engine());
        host_env::add_to_linker(&mut linker).map_err(anyhow::Error::from)?;
        if needs_wasi {
            wasmgate_runtime::wasi::add_to_linker(&mut linker, |s: &mut FilterState| s.wasi())
                .map_err(anyhow::Error::from)?;
        }
        // Reported by the embedder (`host_env::unimplemented_imports`): the
        // gateway warns once per plugin, `wasmgate check` lists them.
        host_env::stub_unknown_imports(&mut linker, module);
        // Checks every import now (the giving functions against their
        // placeholders, see host_env), so that a module that cannot link is
        // refused with the name of what is missing.
        linker
            .instantiate_pre(module)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("linking filter `{}`", config.name))?;
        let imports =
            import_sources(module).with_context(|| format!("linking filter `{}`", config.name))?;
        let giving = giving::prepare(runtime, &linker)?;
        let plugin = FilterPlugin {
            pool: InstancePool::new(config.pool.clone()),
            shared: Arc::new(FilterShared::new(config, needs_wasi)),
            runtime: runtime.clone(),
            linker,
            module: module.clone(),
            imports,
            giving,
            batch: batch::module(runtime)?,
            abi,
            root_stop: Arc::new(Notify::new()),
        };
        let mut first = plugin
            .pool
            .acquire(|| plugin.instantiate())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let state = first.instance().store().data();
        let needs_root = state.tick_period_ms > 0 || !state.registered_queues.is_empty();
        first.release();
        let plugin = Arc::new(plugin);
        if needs_root {
            let root = plugin.instantiate().await?;
            crate::root::spawn(&plugin, root, plugin.root_stop.clone());
        }
        Ok(plugin)
    }

    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    pub fn abi_version(&self) -> AbiVersion {
        self.abi
    }

    /// The instance pool's counters.
    pub fn status(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Calls, latency, failures and memory of this plugin's instances.
    pub fn stats(&self) -> &PluginStats {
        &self.shared.stats
    }

    /// The route this filter instance set serves.
    pub fn route(&self) -> &str {
        &self.shared.config.route
    }

    /// Starts an HTTP stream: leases an instance and creates the stream's context.
    pub async fn stream(self: &Arc<Self>) -> Result<FilterStream, FilterError> {
        let lease = self
            .pool
            .acquire(|| self.instantiate())
            .await
            .map_err(|e| FilterError::Unavailable {
                plugin: self.shared.config.name.clone(),
                reason: e.to_string(),
            })?;
        FilterStream::start(self.clone(), lease).await
    }

    pub(crate) async fn instantiate(&self) -> Result<FilterInstance> {
        let wasi = if self.shared.needs_wasi {
            // No arguments, environment, files or sockets: stdout and stderr
            // go to the log, clocks and randomness are the host's.
            let config = &self.shared.config;
            let (stdout, stderr) = LogStream::pair(&config.name, &config.route);
            Some(
                wasmtime_wasi::WasiCtxBuilder::new()
                    .stdout(stdout)
                    .stderr(stderr)
                    .build_p1(),
            )
        } else {
            None
        };
        let mut store = Store::new(
            self.runtime.engine(),
            FilterState::new(self.shared.clone(), wasi),
        );
        store.limiter(|s| &mut s.limiter);
        install_epoch_policy(&mut store);
        let startup = (self.shared.config.startup_timeout).unwrap_or(DEFAULT_STARTUP_TIMEOUT);
        let ticks = store.data_mut().budget.start(Some(startup));
        store.set_epoch_deadline(ticks);

        let (instance, guest) = self
            .link(&mut store)
            .await
            .map_err(|e| self.start_failure("instantiation", e))?;
        store.data_mut().guest = Some(guest);
        self.start(&mut store, &instance)
            .await
            .map_err(|e| self.start_failure("start-up", e))?;
        let mut exports = Exports::find(&mut store, &instance)?;
        exports.batched = batch::link(&mut store, &self.batch, &exports)
            .await
            .map_err(|e| self.start_failure("linking the batched callbacks", e))?;
        let exports = Arc::new(exports);
        Ok(FilterInstance {
            store: Some(store),
            exports,
            next_context_id: ROOT_CONTEXT_ID,
            crashed: false,
        })
    }

    /// Instantiates the module in `store`, with the giving module (its
    /// allocator set once the module exists) for the imports it answers.
    async fn link(
        &self,
        store: &mut Store<FilterState>,
    ) -> wasmtime::Result<(Instance, GuestMemory)> {
        let giving = Giving::instantiate(&self.giving, store).await?;
        let mut imports = Vec::with_capacity(self.imports.len());
        for source in &self.imports {
            imports.push(match source {
                ImportSource::Giving(name) => Extern::Func(giving.import(store, name)),
                ImportSource::Linker { module, name } => {
                    self.linker.get(&mut *store, module, name)?
                }
            });
        }
        let instance = Instance::new_async(&mut *store, &self.module, &imports).await?;
        let guest = guest_memory(store, &instance).map_err(|e| wasmtime::format_err!("{e}"))?;
        giving.set_allocator(store, *guest.allocate.func())?;
        Ok((instance, guest))
    }

    /// Runs the module's start-up code, creates the root context, and
    /// delivers the VM and plugin configurations; a `false` from either
    /// refuses the plugin, as in Envoy.
    async fn start(
        &self,
        store: &mut Store<FilterState>,
        instance: &Instance,
    ) -> wasmtime::Result<()> {
        for init in ["_initialize", "_start"] {
            if let Ok(f) = instance.get_typed_func::<(), ()>(&mut *store, init) {
                f.call_async(&mut *store, ()).await?;
                break;
            }
        }
        let create =
            instance.get_typed_func::<(u32, u32), ()>(&mut *store, "proxy_on_context_create")?;
        create.call_async(&mut *store, (ROOT_CONTEXT_ID, 0)).await?;
        let vm_size = self.shared.config.vm_configuration.len() as u32;
        if let Ok(vm_start) =
            instance.get_typed_func::<(u32, u32), i32>(&mut *store, "proxy_on_vm_start")
        {
            if vm_start
                .call_async(&mut *store, (ROOT_CONTEXT_ID, vm_size))
                .await?
                == 0
            {
                wasmtime::bail!("proxy_on_vm_start returned false");
            }
        }
        let conf_size = self.shared.config.plugin_configuration.len() as u32;
        if let Ok(configure) =
            instance.get_typed_func::<(u32, u32), i32>(&mut *store, "proxy_on_configure")
        {
            if configure
                .call_async(&mut *store, (ROOT_CONTEXT_ID, conf_size))
                .await?
                == 0
            {
                wasmtime::bail!(
                    "proxy_on_configure returned false (the plugin rejected its configuration)"
                );
            }
        }
        Ok(())
    }

    fn start_failure(&self, stage: &str, error: wasmtime::Error) -> anyhow::Error {
        CrashReport::start_failure(&self.shared.config.name, stage, error)
    }
}

/// Where an import of a filter module comes from.
enum ImportSource {
    /// The giving module (`giving.rs`): `env`'s functions that hand the
    /// guest a value.
    Giving(String),
    /// The host's linker: every other function, WASI, the stubs.
    Linker { module: String, name: String },
}

fn import_sources(module: &Module) -> Result<Vec<ImportSource>> {
    module
        .imports()
        .map(|import| {
            anyhow::ensure!(
                import.module() != host_env::GIVING_MODULE,
                "the module imports `{}` from `{}`, which is wasmgate's own",
                import.name(),
                import.module()
            );
            Ok(if giving::answers(import.module(), import.name()) {
                ImportSource::Giving(import.name().to_string())
            } else {
                ImportSource::Linker {
                    module: import.module().to_string(),
                    name: import.name().to_string(),
                }
            })
        })
        .collect()
}

fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &Store<FilterState>,
    f: Option<wasmtime::Func>,
) -> wasmtime::Result<Option<TypedFunc<P, R>>> {
    f.map(|f| f.typed(store)).transpose()
}

fn guest_memory(store: &mut Store<FilterState>, instance: &Instance) -> Result<GuestMemory> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .context("the module exports no `memory`")?;
    // `malloc` first, as Envoy's host does: the AssemblyScript SDK exports
    // both, and only its `malloc` makes buffers its runtime can read (its
    // `proxy_on_memory_allocate` hands out raw memory without the header an
    // ArrayBuffer needs).
    let allocate = instance
        .get_typed_func::<u32, u32>(&mut *store, "malloc")
        .or_else(|_| instance.get_typed_func::<u32, u32>(&mut *store, "proxy_on_memory_allocate"))
        .map_err(|_| {
            anyhow::anyhow!("the module exports neither `proxy_on_memory_allocate` nor `malloc`")
        })?;
    Ok(GuestMemory { memory, allocate })
}

impl Exports {
    fn find(store: &mut Store<FilterState>, instance: &Instance) -> Result<Exports> {
        let mut callback = |name: &str| {
            instance
                .get_typed_func::<(u32, u32, u32), i32>(&mut *store, name)
                .ok()
        };
        let request_headers = callback("proxy_on_request_headers");
        let request_body = callback("proxy_on_request_body");
        let response_headers = callback("proxy_on_response_headers");
        let response_body = callback("proxy_on_response_body");
        let mut get = |name: &str| instance.get_func(&mut *store, name);
        let (log, done, delete, tick) = (
            get("proxy_on_log"),
            get("proxy_on_done"),
            get("proxy_on_delete"),
            get("proxy_on_tick"),
        );
        let (request_trailers, response_trailers, queue_ready, call_response) = (
            get("proxy_on_request_trailers"),
            get("proxy_on_response_trailers"),
            get("proxy_on_queue_ready"),
            get("proxy_on_http_call_response"),
        );
        let redis_response = get("proxy_on_redis_call_response");
        let (grpc_receive, grpc_close) = (get("proxy_on_grpc_receive"), get("proxy_on_grpc_close"));
        let (grpc_initial_metadata, grpc_trailing_metadata) = (
            get("proxy_on_grpc_receive_initial_metadata"),
            get("proxy_on_grpc_receive_trailing_metadata"),
        );
        // An export with the wrong signature is refused up front rather than
        // trapping on the first request.
        let exports = (|| -> wasmtime::Result<Exports> {
            Ok(Exports {
                context_create: instance.get_typed_func(&mut *store, "proxy_on_context_create")?,
                request_headers,
                request_body,
                request_trailers: typed(&*store, request_trailers)?,
                response_headers,
                response_body,
                response_trailers: typed(&*store, response_trailers)?,
                log: typed(&*store, log)?,
                done: typed(&*store, done)?,
                delete: typed(&*store, delete)?,
                tick: typed(&*store, tick)?,
                queue_ready: typed(&*store, queue_ready)?,
                http_call_response: typed(&*store, call_response)?,
                redis_call_response: typed(&*store, redis_response)?,
                grpc_receive: typed(&*store, grpc_receive)?,
                grpc_close: typed(&*store, grpc_close)?,
                grpc_initial_metadata: typed(&*store, grpc_initial_metadata)?,
                grpc_trailing_metadata: typed(&*store, grpc_trailing_metadata)?,
                batched: None,
            })
        })();
        exports
            .map_err(anyhow::Error::from)
            .context("a Proxy-Wasm callback export has the wrong signature")
    }
}

impl FilterInstance {
    /// Runs one guest call under the plugin's deadline; a failure becomes a
    /// crash report (the caller must then drop the instance).
    pub async fn run<C: Callback>(
        &mut self,
        name: &'static str,
        callback: C,
    ) -> Result<C::Output, FilterError> {
        let mut store = self.store.take().expect(STORE_OUT);
        let plugin = store.data().plugin.clone();
        let ticks = store.data_mut().budget.start(plugin.config.timeout);
        let started = store.data().budget.started();
        store.set_epoch_deadline(ticks);
        // The callback owns the store while it runs, so that it can move to
        // the slow lane if it runs long.
        let call = Box::pin(async move {
            let outcome = callback.call(&mut store).await;
            (store, outcome)
        });
        let finished = slow_lane::run(started, call).await;
        plugin.stats.record_call(finished.wall, finished.cpu);
        let (store, outcome) = finished.output;
        self.crashed |= outcome.is_err();
        let store = self.store.insert(store);
        outcome.map_err(|error| {
            let timed_out = store.data().budget.timed_out();
            let mut report = CrashReport::from_error(&plugin.config.name, name, &error, timed_out);
            // A stream's callback has the request's exchange; a root
            // context's (ticks, queues) has none (id 0).
            let request = store.data().exchange.info.id;
            report.request_id = (request != 0).then_some(request);
            plugin.stats.record_crash(&report);
            tracing::warn!(plugin = %plugin.config.name, route = %plugin.config.route, callback = name, kind = report.kind.as_str(), "{report}");
            FilterError::Crash(Box::new(report))
        })
    }

    /// Lends `exchange` to the instance for one callback.
    pub async fn run_with<C: Callback>(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        name: &'static str,
        callback: C,
    ) -> Result<C::Output, FilterError> {
        // The boxes are swapped, not the exchanges (close to a kilobyte, moved
        // twice per callback), nor taken (`take` builds an empty exchange and
        // drops the one it replaces: 1 k instructions a request,
        // bench/instructions.py); the store's slot holds an empty one between
        // callbacks.
        std::mem::swap(exchange, &mut self.store_mut().data_mut().exchange);
        let result = self.run(name, callback).await;
        std::mem::swap(exchange, &mut self.store_mut().data_mut().exchange);
        result
    }

    /// Whether the instance may run again: no callback of it was cut off
    /// half-way (its request went away mid-call, which takes the store
    /// along) and none crashed.
    pub fn is_intact(&self) -> bool {
        self.store.is_some() && !self.crashed
    }

    pub fn store(&self) -> &Store<FilterState> {
        self.store.as_ref().expect(STORE_OUT)
    }

    pub fn store_mut(&mut self) -> &mut Store<FilterState> {
        self.store.as_mut().expect(STORE_OUT)
    }

    /// Sends the calls the last callback dispatched.
    pub fn start_dispatched_calls(&mut self, calls: &mut CallsInFlight) {
        let dispatched = std::mem::take(&mut self.store_mut().data_mut().dispatched_calls);
        let config = &self.store().data().plugin.config;
        let caller = config.http_caller.as_deref();
        let plugin = (config.name.as_str(), &config.limits);
        for (token, callout) in dispatched {
            calls.start(token, callout, caller, &config.services, plugin);
        }
        for token in std::mem::take(&mut self.store_mut().data_mut().cancelled_calls) {
            calls.cancel(token);
        }
        self.store_mut().data_mut().calls_in_flight = calls.len();
    }

    /// Delivers a call's answer in the callback its kind has.
    pub async fn deliver_answer(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        answer: Answer,
    ) -> Result<(), FilterError> {
        // The call is over, unless this is a stream's event before its close.
        let over =
            !matches!(&answer, Answer::GrpcStream(e) if !matches!(e, StreamEvent::Close(..)));
        if over {
            let state = self.store_mut().data_mut();
            state.calls_in_flight = state.calls_in_flight.saturating_sub(1);
        }
        match answer {
            Answer::Http(result) => self.deliver_call_response(exchange, token, result).await,
            Answer::Redis(result) => self.deliver_redis_response(exchange, token, result).await,
            Answer::Grpc(outcome) => self.deliver_grpc_outcome(exchange, token, outcome).await,
            Answer::GrpcStream(event) => self.deliver_stream_event(exchange, token, event).await,
        }
    }

    /// What a gRPC stream's server sent (see `grpc_stream.rs`): metadata
    /// readable as map 4 or 5 during its callback, a message as buffer 5,
    /// the close with its status message in `proxy_get_status`.
    async fn deliver_stream_event(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        event: StreamEvent,
    ) -> Result<(), FilterError> {
        let (name, f, size) = match event {
            StreamEvent::InitialMetadata(metadata) => {
                let count = metadata.len() as u32;
                let kind = MapType::GrpcReceiveInitialMetadata;
                self.store_mut().data_mut().grpc_metadata = Some((kind, metadata));
                let f = self.exports.grpc_initial_metadata.clone();
                ("proxy_on_grpc_receive_initial_metadata", f, count)
            }
            StreamEvent::TrailingMetadata(metadata) => {
                let count = metadata.len() as u32;
                let kind = MapType::GrpcReceiveTrailingMetadata;
                self.store_mut().data_mut().grpc_metadata = Some((kind, metadata));
                let f = self.exports.grpc_trailing_metadata.clone();
                ("proxy_on_grpc_receive_trailing_metadata", f, count)
            }
            StreamEvent::Message(message) => {
                let size = message.len() as u32;
                self.store_mut().data_mut().grpc_reply = Some(message);
                (
                    "proxy_on_grpc_receive",
                    self.exports.grpc_receive.clone(),
                    size,
                )
            }
            StreamEvent::Close(code, message) => {
                let state = self.store_mut().data_mut();
                state.grpc_streams.remove(&token);
                if code != GRPC_OK {
                    let plugin = &state.plugin.config;
                    tracing::info!(plugin = %plugin.name, route = %plugin.route, token, code, %message, "grpc stream closed with an error");
                }
                state.last_call_status = (code, message);
                ("proxy_on_grpc_close", self.exports.grpc_close.clone(), code)
            }
        };
        let result = match f {
            Some(f) => {
                let params = (ROOT_CONTEXT_ID, token, size);
                self.run_with(exchange, name, (f, params)).await
            }
            None => Ok(()),
        };
        let state = self.store_mut().data_mut();
        state.grpc_metadata = None;
        state.grpc_reply = None;
        result
    }

    /// A unary gRPC call's end (see `grpc_call.rs`): its reply's message
    /// through `proxy_on_grpc_receive`, readable as buffer 5, or its status
    /// through `proxy_on_grpc_close`, with the message in `proxy_get_status`.
    async fn deliver_grpc_outcome(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        outcome: GrpcOutcome,
    ) -> Result<(), FilterError> {
        match outcome {
            GrpcOutcome::Reply(message) => {
                let Some(f) = self.exports.grpc_receive.clone() else {
                    return Ok(());
                };
                let size = message.len() as u32;
                let state = self.store_mut().data_mut();
                state.last_call_status = (GRPC_OK, String::new());
                state.grpc_reply = Some(message);
                let result = self
                    .run_with(
                        exchange,
                        "proxy_on_grpc_receive",
                        (f, (ROOT_CONTEXT_ID, token, size)),
                    )
                    .await;
                self.store_mut().data_mut().grpc_reply = None;
                result
            }
            GrpcOutcome::ReplyTooLarge(limit) => {
                let plugin = &self.store().data().plugin;
                refuse(plugin, Limit::CallReplyBytes, "proxy_grpc_call");
                let message = CallFailure::ReplyTooLarge { limit }.to_string();
                self.close_grpc_call(exchange, token, GRPC_RESOURCE_EXHAUSTED, message)
                    .await
            }
            GrpcOutcome::Status(code, message) => {
                self.close_grpc_call(exchange, token, code, message).await
            }
        }
    }

    /// A unary gRPC call's end with status `code`.
    async fn close_grpc_call(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        code: u32,
        message: String,
    ) -> Result<(), FilterError> {
        let Some(f) = self.exports.grpc_close.clone() else {
            return Ok(());
        };
        let plugin = &self.store().data().plugin.config;
        tracing::info!(plugin = %plugin.name, route = %plugin.route, token, code, %message, "grpc call failed");
        self.store_mut().data_mut().last_call_status = (code, message);
        self.run_with(
            exchange,
            "proxy_on_grpc_close",
            (f, (ROOT_CONTEXT_ID, token, code)),
        )
        .await
    }

    /// `proxy_on_redis_call_response` on the root context (Higress's
    /// framework finds the stream that made the call by the token), with
    /// the reply in buffer 9; a call that got no reply is status 1 and size
    /// 0, as Envoy reports it.
    async fn deliver_redis_response(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        result: Result<Vec<u8>, String>,
    ) -> Result<(), FilterError> {
        let Some(f) = self.exports.redis_call_response.clone() else {
            return Ok(());
        };
        let (status, reply) = match result {
            Ok(reply) => (REDIS_OK, reply),
            Err(reason) => {
                let plugin = &self.store().data().plugin.config;
                tracing::info!(plugin = %plugin.name, route = %plugin.route, token, %reason, "redis call failed");
                (REDIS_NETWORK_ERROR, Vec::new())
            }
        };
        let size = reply.len() as u32;
        self.store_mut().data_mut().redis_reply = Some(reply);
        let result = self
            .run_with(
                exchange,
                "proxy_on_redis_call_response",
                (f, (ROOT_CONTEXT_ID, token, status, size)),
            )
            .await;
        self.store_mut().data_mut().redis_reply = None;
        result
    }

    /// `proxy_on_http_call_response` on the root context. A failed call is
    /// reported as an answer with no headers and no body, as Envoy does,
    /// with the reason in `proxy_get_status`: UNAVAILABLE (14) when no
    /// answer came, RESOURCE_EXHAUSTED (8) when it was over
    /// `call_reply_bytes` (and not read further).
    async fn deliver_call_response(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        token: u32,
        result: Result<Box<HttpCallResponse>, CallFailure>,
    ) -> Result<(), FilterError> {
        if let Err(CallFailure::ReplyTooLarge { .. }) = &result {
            let plugin = &self.store().data().plugin;
            refuse(plugin, Limit::CallReplyBytes, "proxy_http_call");
        }
        let Some(f) = self.exports.http_call_response.clone() else {
            return Ok(());
        };
        let response = match result {
            Ok(response) => {
                self.store_mut().data_mut().last_call_status = (GRPC_OK, String::new());
                response
            }
            Err(failure) => {
                let code = match failure {
                    CallFailure::Failed(_) => GRPC_UNAVAILABLE,
                    CallFailure::ReplyTooLarge { .. } => GRPC_RESOURCE_EXHAUSTED,
                };
                let reason = failure.to_string();
                let plugin = &self.store().data().plugin.config;
                tracing::info!(plugin = %plugin.name, route = %plugin.route, token, %reason, "http call failed");
                self.store_mut().data_mut().last_call_status = (code, reason);
                Box::default()
            }
        };
        let sizes = (
            response.headers.len() as u32,
            response.body.len() as u32,
            response.trailers.len() as u32,
        );
        self.store_mut().data_mut().call_response = Some(response);
        let result = self
            .run_with(
                exchange,
                "proxy_on_http_call_response",
                (f, (ROOT_CONTEXT_ID, token, sizes.0, sizes.1, sizes.2)),
            )
            .await;
        self.store_mut().data_mut().call_response = None;
        result
    }

    /// `proxy_on_tick` on the root context.
    pub async fn tick(&mut self, exchange: &mut Box<HttpExchange>) -> Result<(), FilterError> {
        let Some(f) = self.exports.tick.clone() else {
            return Ok(());
        };
        self.run_with(exchange, "proxy_on_tick", (f, ROOT_CONTEXT_ID))
            .await
    }

    pub fn tick_period(&self) -> Option<Duration> {
        match self.store().data().tick_period_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        }
    }
}
