//! A Proxy-Wasm filter plugin: one module, its VM and plugin configuration,
//! and a pool of instances, each with one root context configured with that
//! plugin configuration (so a plugin used on two routes with two
//! configurations is two `FilterPlugin`s). [`FilterPlugin::stream`] leases an
//! instance for one HTTP stream; the stream's callbacks run on it in order.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use wasmgate_runtime::limits::install_epoch_policy;
use wasmgate_runtime::{CrashReport, InstancePool, Lease, PoolConfig, PoolStats, Runtime};
use wasmtime::{Instance, InstancePre, Linker, Store, TypedFunc};

use crate::abi::{AbiVersion, Action};
use crate::exchange::HttpExchange;
use crate::host_env;
use crate::state::{FilterState, GuestMemory};

const WASI_MODULE: &str = "wasi_snapshot_preview1";
const ROOT_CONTEXT_ID: u32 = 1;
/// Deadline of start-up code and root-context callbacks.
const START_TIMEOUT: Duration = Duration::from_secs(30);

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
    pub memory_limit: Option<usize>,
    /// Deadline of one callback.
    pub timeout: Option<Duration>,
    pub pool: PoolConfig,
}

/// What every instance of a filter plugin shares.
pub(crate) struct FilterShared {
    pub config: FilterConfig,
    pub needs_wasi: bool,
}

pub struct FilterPlugin {
    shared: Arc<FilterShared>,
    runtime: Runtime,
    pre: InstancePre<FilterState>,
    abi: AbiVersion,
    pool: InstancePool<FilterInstance>,
}

pub(crate) struct FilterInstance {
    store: Store<FilterState>,
    exports: StreamExports,
    next_context_id: u32,
}

/// The stream callbacks, typed once per instance.
struct StreamExports {
    context_create: TypedFunc<(u32, u32), ()>,
    request_headers: Option<TypedFunc<(u32, u32, u32), i32>>,
    request_body: Option<TypedFunc<(u32, u32, u32), i32>>,
    response_headers: Option<TypedFunc<(u32, u32, u32), i32>>,
    response_body: Option<TypedFunc<(u32, u32, u32), i32>>,
    log: Option<TypedFunc<u32, ()>>,
    done: Option<TypedFunc<u32, i32>>,
    delete: Option<TypedFunc<u32, ()>>,
}

/// Why a callback failed: the guest trapped, ran out of time or memory, or
/// refused to start.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{0}")]
    Crash(Box<CrashReport>),
    #[error("filter `{plugin}` is unavailable: {reason}")]
    Unavailable { plugin: String, reason: String },
}

impl FilterPlugin {
    /// Compiles (or loads from the cache) `wasm` and checks that it is a
    /// Proxy-Wasm module this host can link. The first instance is created
    /// and configured now, so a plugin whose `proxy_on_vm_start` or
    /// `proxy_on_configure` fails is refused here.
    pub async fn new(runtime: &Runtime, wasm: &[u8], config: FilterConfig) -> Result<FilterPlugin> {
        let module = runtime.load_module(wasm)?;
        let abi = AbiVersion::detect(module.exports().map(|e| e.name()))
            .map_err(|reason| anyhow::anyhow!("filter `{}`: {reason}", config.name))?;
        let needs_wasi = module.imports().any(|i| i.module() == WASI_MODULE);
        let mut linker = Linker::new(runtime.engine());
        host_env::add_to_linker(&mut linker).map_err(anyhow::Error::from)?;
        if needs_wasi {
            wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut FilterState| s.wasi())
                .map_err(anyhow::Error::from)?;
        }
        let pre = linker
            .instantiate_pre(&module)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("linking filter `{}`", config.name))?;
        let plugin = FilterPlugin {
            pool: InstancePool::new(config.pool.clone()),
            shared: Arc::new(FilterShared { config, needs_wasi }),
            runtime: runtime.clone(),
            pre,
            abi,
        };
        let first = plugin.pool.acquire(|| plugin.instantiate()).await;
        first.map_err(|e| anyhow::anyhow!("{e}"))?.release();
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

    /// Starts an HTTP stream: leases an instance and creates the stream's context.
    pub async fn stream(&self) -> Result<FilterStream<'_>, FilterError> {
        let mut lease = self
            .pool
            .acquire(|| self.instantiate())
            .await
            .map_err(|e| FilterError::Unavailable {
                plugin: self.shared.config.name.clone(),
                reason: e.to_string(),
            })?;
        let instance = lease.instance();
        instance.next_context_id += 1;
        let context_id = instance.next_context_id;
        let create = instance.exports.context_create.clone();
        let mut stream = FilterStream {
            plugin: self,
            lease,
            context_id,
        };
        stream
            .run("proxy_on_context_create", async |store| {
                create
                    .call_async(store, (context_id, ROOT_CONTEXT_ID))
                    .await
            })
            .await?;
        Ok(stream)
    }

    async fn instantiate(&self) -> Result<FilterInstance> {
        let wasi = if self.shared.needs_wasi {
            Some(wasmtime_wasi::WasiCtxBuilder::new().build_p1())
        } else {
            None
        };
        let mut store = Store::new(
            self.runtime.engine(),
            FilterState::new(self.shared.clone(), wasi),
        );
        store.limiter(|s| &mut s.limiter);
        install_epoch_policy(&mut store);
        let ticks = store.data_mut().budget.start(Some(START_TIMEOUT));
        store.set_epoch_deadline(ticks);

        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| self.start_failure("instantiation", e))?;
        store.data_mut().guest = Some(guest_memory(&mut store, &instance)?);
        self.start(&mut store, &instance)
            .await
            .map_err(|e| self.start_failure("start-up", e))?;
        let exports = StreamExports::find(&mut store, &instance)?;
        Ok(FilterInstance {
            store,
            exports,
            next_context_id: ROOT_CONTEXT_ID,
        })
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

fn guest_memory(store: &mut Store<FilterState>, instance: &Instance) -> Result<GuestMemory> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .context("the module exports no `memory`")?;
    let allocate = instance
        .get_typed_func::<u32, u32>(&mut *store, "proxy_on_memory_allocate")
        .or_else(|_| instance.get_typed_func::<u32, u32>(&mut *store, "malloc"))
        .map_err(|_| {
            anyhow::anyhow!("the module exports neither `proxy_on_memory_allocate` nor `malloc`")
        })?;
    Ok(GuestMemory { memory, allocate })
}

impl StreamExports {
    fn find(store: &mut Store<FilterState>, instance: &Instance) -> Result<StreamExports> {
        let mut callback = |name: &str| {
            instance
                .get_typed_func::<(u32, u32, u32), i32>(&mut *store, name)
                .ok()
        };
        let request_headers = callback("proxy_on_request_headers");
        let request_body = callback("proxy_on_request_body");
        let response_headers = callback("proxy_on_response_headers");
        let response_body = callback("proxy_on_response_body");
        Ok(StreamExports {
            context_create: instance
                .get_typed_func(&mut *store, "proxy_on_context_create")
                .map_err(anyhow::Error::from)?,
            request_headers,
            request_body,
            response_headers,
            response_body,
            log: instance.get_typed_func(&mut *store, "proxy_on_log").ok(),
            done: instance.get_typed_func(&mut *store, "proxy_on_done").ok(),
            delete: instance.get_typed_func(&mut *store, "proxy_on_delete").ok(),
        })
    }
}

/// One HTTP stream on a leased instance.
pub struct FilterStream<'a> {
    plugin: &'a FilterPlugin,
    lease: Lease<'a, FilterInstance>,
    context_id: u32,
}

impl FilterStream<'_> {
    pub async fn on_request_headers(
        &mut self,
        exchange: &mut HttpExchange,
        end_of_stream: bool,
    ) -> Result<Action, FilterError> {
        let count = exchange.request_headers.len() as u32;
        let f = self.lease.instance().exports.request_headers.clone();
        self.callback(
            "proxy_on_request_headers",
            f,
            exchange,
            count,
            end_of_stream,
        )
        .await
    }

    pub async fn on_request_body(
        &mut self,
        exchange: &mut HttpExchange,
        end_of_stream: bool,
    ) -> Result<Action, FilterError> {
        let size = exchange.request_body.len() as u32;
        let f = self.lease.instance().exports.request_body.clone();
        self.callback("proxy_on_request_body", f, exchange, size, end_of_stream)
            .await
    }

    pub async fn on_response_headers(
        &mut self,
        exchange: &mut HttpExchange,
        end_of_stream: bool,
    ) -> Result<Action, FilterError> {
        let count = exchange.response_headers.len() as u32;
        let f = self.lease.instance().exports.response_headers.clone();
        self.callback(
            "proxy_on_response_headers",
            f,
            exchange,
            count,
            end_of_stream,
        )
        .await
    }

    pub async fn on_response_body(
        &mut self,
        exchange: &mut HttpExchange,
        end_of_stream: bool,
    ) -> Result<Action, FilterError> {
        let size = exchange.response_body.len() as u32;
        let f = self.lease.instance().exports.response_body.clone();
        self.callback("proxy_on_response_body", f, exchange, size, end_of_stream)
            .await
    }

    /// Ends the stream: `proxy_on_log`, `proxy_on_done`, `proxy_on_delete`;
    /// the instance goes back to the pool.
    pub async fn finish(mut self, exchange: &mut HttpExchange) -> Result<(), FilterError> {
        let id = self.context_id;
        let exports = &self.lease.instance().exports;
        let (log, done, delete) = (
            exports.log.clone(),
            exports.done.clone(),
            exports.delete.clone(),
        );
        self.with_exchange(exchange, "proxy_on_log", async |store| {
            if let Some(f) = log {
                f.call_async(&mut *store, id).await?;
            }
            if let Some(f) = done {
                f.call_async(&mut *store, id).await?;
            }
            if let Some(f) = delete {
                f.call_async(&mut *store, id).await?;
            }
            Ok(())
        })
        .await?;
        self.lease.release();
        Ok(())
    }

    async fn callback(
        &mut self,
        name: &'static str,
        f: Option<TypedFunc<(u32, u32, u32), i32>>,
        exchange: &mut HttpExchange,
        size: u32,
        end_of_stream: bool,
    ) -> Result<Action, FilterError> {
        let Some(f) = f else {
            return Ok(Action::Continue);
        };
        let id = self.context_id;
        let code = self
            .with_exchange(exchange, name, async |store| {
                f.call_async(store, (id, size, end_of_stream as u32)).await
            })
            .await?;
        Ok(Action::from_code(code))
    }

    /// Lends `exchange` to the instance for one callback.
    async fn with_exchange<R>(
        &mut self,
        exchange: &mut HttpExchange,
        name: &'static str,
        body: impl AsyncFnOnce(&mut Store<FilterState>) -> wasmtime::Result<R>,
    ) -> Result<R, FilterError> {
        let store = &mut self.lease.instance().store;
        store.data_mut().exchange = std::mem::take(exchange);
        let result = self.run(name, body).await;
        *exchange = std::mem::take(&mut self.lease.instance().store.data_mut().exchange);
        result
    }

    /// Runs one guest call under the plugin's deadline; a failure becomes a
    /// crash report and the instance is not returned to the pool.
    async fn run<R>(
        &mut self,
        name: &'static str,
        body: impl AsyncFnOnce(&mut Store<FilterState>) -> wasmtime::Result<R>,
    ) -> Result<R, FilterError> {
        let store = &mut self.lease.instance().store;
        let ticks = store
            .data_mut()
            .budget
            .start(self.plugin.shared.config.timeout);
        store.set_epoch_deadline(ticks);
        body(store).await.map_err(|error| {
            let timed_out = self.lease.instance().store.data().budget.timed_out();
            let report = CrashReport::from_error(&self.plugin.shared.config.name, name, &error, timed_out);
            tracing::warn!(plugin = %self.plugin.shared.config.name, callback = name, kind = report.kind.as_str(), "{report}");
            FilterError::Crash(Box::new(report))
        })
    }
}
