//! A Proxy-Wasm filter plugin: one module, its VM and plugin configuration,
//! and a pool of instances, each with one root context configured with that
//! plugin configuration (so a plugin used on two routes with two
//! configurations is two `FilterPlugin`s). [`FilterPlugin::stream`] leases an
//! instance for one HTTP stream (see `stream.rs`); a plugin that asks for
//! ticks or registers queues also gets a root instance of its own (`root.rs`).

use std::sync::Arc;

use tokio::sync::Notify;

use anyhow::{Context, Result};
use wasmgate_runtime::guest_log::LogStream;
use wasmgate_runtime::limits::install_epoch_policy;
use wasmgate_runtime::{CrashReport, InstancePool, PluginStats, PoolStats, Runtime};
use wasmtime::{Extern, Instance, InstancePre, Linker, Module, Store};

use crate::abi::AbiVersion;
use crate::batch;
use crate::config::{FilterConfig, DEFAULT_STARTUP_TIMEOUT};
use crate::error::FilterError;
use crate::exports::Exports;
use crate::filter_shared::FilterShared;
use crate::giving::{self, Giving};
use crate::host_env;
use crate::instance::{FilterInstance, ROOT_CONTEXT_ID};
use crate::state::{FilterState, GuestMemory};
use crate::stream::FilterStream;

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
    batch: batch::Modules,
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
            batch: batch::modules(runtime)?,
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
        (store.data_mut().limiter).started(self.shared.config.memory_limit);
        let mut exports = Exports::find(&mut store, &instance)?;
        exports.batched = batch::link(&mut store, &self.batch, &exports)
            .await
            .map_err(|e| self.start_failure("linking the batched callbacks", e))?;
        let exports = Arc::new(exports);
        Ok(FilterInstance::new(store, exports))
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
