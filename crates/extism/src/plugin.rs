//! A loaded Extism plugin: its compiled modules, its shared state (config,
//! vars, limits: `PluginShared`, in `state.rs`) and its pool of instances.
//! [`Plugin::call`] is the whole life of a call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use rustc_hash::FxHashMap;
use wasmgate_runtime::limits::install_epoch_policy;
use wasmgate_runtime::slow_lane;
use wasmgate_runtime::{
    CrashReport, InstancePool, PluginStats, PoolConfig, PoolStats, PrecompiledPolicy, Runtime,
};
use wasmtime::{AsContextMut, ExternType, Instance, Linker, Module, Store, TypedFunc, ValType};
use wasmtime_wasi::I32Exit;

use crate::error::CallError;
use crate::host_env;
use crate::host_function::HostFunction;
use crate::http::{AllowedHosts, DEFAULT_MAX_RESPONSE_BYTES};
use crate::kernel::{self, Kernel};
use crate::manifest::{Manifest, MAIN_MODULE};
use crate::state::{ExtismState, PluginShared};

/// Default var store size, as in the reference runtime.
const DEFAULT_MAX_VAR_BYTES: u64 = 1024 * 1024;
/// Deadline for a guest's start-up code when the manifest sets no timeout.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// How a plugin is run, beyond what its manifest says.
#[derive(Clone, Default)]
pub struct PluginOptions {
    /// Name used in logs, errors and metrics (default: `main` module file stem).
    pub name: Option<String>,
    pub pool: PoolConfig,
    /// Functions the embedder offers in `extism:host/user` (or other namespaces).
    pub host_functions: Vec<HostFunction>,
    /// Services the plugin may reach through `wasmgate:host/services`;
    /// none by default.
    pub services: wasmgate_services::Grants,
    /// Whether the manifest's `path` modules may be precompiled artifacts
    /// (refused by default; inline `data` never may: see
    /// [`PrecompiledPolicy`]).
    pub precompiled: PrecompiledPolicy,
}

/// A module of the manifest with, for each of its imports, where a new
/// store gets it from; worked out once at load so instantiation is a loop.
struct LinkedModule {
    module: Module,
    imports: Vec<ImportSource>,
}

enum ImportSource {
    /// An Extism memory accessor served by the kernel (index into [`kernel::FUNCTIONS`]).
    Kernel(usize),
    /// An export of another module of the manifest (index into `Plugin::dependencies`).
    Dependency(usize),
    /// A host function from the linker: the rest of `extism:host/env`, WASI,
    /// an embedder's functions.
    Host,
}

pub(crate) struct ExtismInstance {
    store: Store<ExtismState>,
    instance: Instance,
    exports: FxHashMap<String, Export>,
}

/// A callable export, typed once so calls skip the dynamic type check.
#[derive(Clone)]
enum Export {
    ReturnsCode(TypedFunc<(), i32>),
    ReturnsNothing(TypedFunc<(), ()>),
}

/// A plugin ready to be called concurrently; each call gets its own instance.
pub struct Plugin {
    shared: Arc<PluginShared>,
    runtime: Runtime,
    linker: Linker<ExtismState>,
    kernel: Kernel,
    /// Other modules of the manifest, in instantiation order.
    dependencies: Vec<LinkedModule>,
    main: LinkedModule,
    pool: InstancePool<ExtismInstance>,
}

/// A snapshot for status pages.
#[derive(Clone, Debug)]
pub struct PluginStatus {
    pub name: String,
    pub pool: PoolStats,
}

impl Plugin {
    /// Compiles the manifest's modules and links them; fails with a message
    /// naming the module and import when something is missing.
    pub fn new(runtime: &Runtime, manifest: &Manifest, options: PluginOptions) -> Result<Plugin> {
        let loaded = manifest.load_modules(runtime, options.precompiled)?;
        let mut modules: Vec<_> = loaded
            .iter()
            .map(|m| (m.name.clone(), m.module.clone()))
            .collect();
        let main_index = modules
            .iter()
            .position(|(n, _)| n == MAIN_MODULE)
            .expect("checked by load_modules");
        let (_, main) = modules.remove(main_index);
        let needs_wasi = std::iter::once(&main)
            .chain(modules.iter().map(|(_, m)| m))
            .any(wasmgate_runtime::wasi::imports_wasi);

        let name: Arc<str> = options
            .name
            .clone()
            .or_else(|| {
                let origin = &loaded[main_index].origin;
                std::path::Path::new(origin)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "plugin".to_string())
            .into();

        let memory_limit = manifest.memory_limit_bytes();
        let shared = Arc::new(PluginShared {
            name: name.clone(),
            config: manifest.config.clone(),
            vars: Mutex::new(BTreeMap::new()),
            max_var_bytes: manifest
                .memory
                .max_var_bytes
                .unwrap_or(DEFAULT_MAX_VAR_BYTES),
            allowed_hosts: AllowedHosts::new(manifest.allowed_hosts.as_deref().unwrap_or_default()),
            max_http_response_bytes: manifest
                .memory
                .max_http_response_bytes
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
            allowed_paths: manifest.allowed_paths.clone().unwrap_or_default(),
            // Extism memory is host memory the guest can make us allocate, so it
            // gets the same cap as linear memory (or wasm32's 4 GiB without one).
            extism_memory_limit: memory_limit.unwrap_or(4 << 30),
            memory_limit,
            timeout: manifest.timeout_ms.map(Duration::from_millis),
            needs_wasi,
            stats: Arc::default(),
            services: options.services.clone(),
        });

        let mut linker = Linker::new(runtime.engine());
        host_env::add_to_linker(&mut linker).map_err(anyhow::Error::from)?;
        crate::services::add_to_linker(&mut linker).map_err(anyhow::Error::from)?;
        if needs_wasi {
            wasmgate_runtime::wasi::add_to_linker(&mut linker, |s: &mut ExtismState| s.wasi())
                .map_err(anyhow::Error::from)?;
        }
        for f in &options.host_functions {
            f.define(&mut linker)?;
        }
        let kernel = Kernel::new(runtime)?;
        let dependencies = order_dependencies(modules)?;
        let names: Vec<String> = dependencies.iter().map(|(n, _)| n.clone()).collect();
        let dependency_names: Vec<&str> = names.iter().map(String::as_str).collect();
        let link = |module_name: &str, module: Module| -> Result<LinkedModule> {
            check_imports(
                module_name,
                &module,
                &options.host_functions,
                &dependency_names,
            )?;
            let imports = plan_imports(module_name, &module, &kernel, &dependency_names)?;
            Ok(LinkedModule { module, imports })
        };
        let main = link(MAIN_MODULE, main)?;
        let dependencies = dependencies
            .into_iter()
            .map(|(name, module)| link(&name, module))
            .collect::<Result<Vec<_>>>()?;

        Ok(Plugin {
            shared,
            runtime: runtime.clone(),
            linker,
            kernel,
            dependencies,
            main,
            pool: InstancePool::new(options.pool),
        })
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether `function` is an export Extism can call (`() -> i32` or `() -> ()`).
    pub fn function_exists(&self, function: &str) -> bool {
        self.main
            .module
            .get_export(function)
            .and_then(|e| e.func().cloned())
            .is_some_and(|f| callable_signature(f.params().len(), &f.results().collect::<Vec<_>>()))
    }

    /// Calls, latency, failures and memory of this plugin's instances.
    pub fn stats(&self) -> &PluginStats {
        &self.shared.stats
    }

    pub fn status(&self) -> PluginStatus {
        PluginStatus {
            name: self.shared.name.to_string(),
            pool: self.pool.stats(),
        }
    }

    /// Calls `function` with `input` and returns its output.
    pub async fn call(&self, function: &str, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.call_with(function, input, <[u8]>::to_vec).await
    }

    /// [`Plugin::call`] on behalf of request `request_id`: a crash report
    /// names it (in the log, the plugin's status and the error returned).
    pub async fn call_in_request(
        &self,
        request_id: u64,
        function: &str,
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.call_inner(function, input, Some(request_id), <[u8]>::to_vec)
            .await
    }

    /// Like [`Plugin::call`], but hands the output to `read` where it lies in
    /// the instance's memory instead of copying it out.
    pub async fn call_with<R>(
        &self,
        function: &str,
        input: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CallError> {
        self.call_inner(function, input, None, read).await
    }

    async fn call_inner<R>(
        &self,
        function: &str,
        input: &[u8],
        request_id: Option<u64>,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CallError> {
        let mut lease = self.pool.acquire(|| self.instantiate()).await?;
        let instance = lease.instance();
        let export = instance.export(function)?;

        let store = &mut instance.store;
        kernel::begin_call(&mut store.as_context_mut(), input)?;
        let ticks = store.data_mut().budget.start(self.shared.timeout);
        let started = store.data().budget.started();
        store.set_epoch_deadline(ticks);

        // The call owns the lease while it runs, so that it can move to the
        // slow lane if it runs long.
        let call = Box::pin(async move {
            let store = &mut lease.instance().store;
            let outcome = match export {
                Export::ReturnsCode(f) => f.call_async(&mut *store, ()).await,
                Export::ReturnsNothing(f) => f.call_async(&mut *store, ()).await.map(|()| 0),
            };
            (lease, outcome)
        });
        let finished = slow_lane::run(started, call).await;
        self.shared.stats.record_call(finished.wall, finished.cpu);
        let (mut lease, outcome) = finished.output;
        let store = &mut lease.instance().store;
        // Only an instance whose call returned normally goes back to the pool;
        // the lease drops any other, so it is never reused.
        let healthy = outcome.is_ok();
        let (bytes, state) = kernel::split(&mut *store);
        let result = self
            .conclude(function, request_id, outcome, state, bytes)
            .map(|()| read(state.memory.output(bytes)));
        if healthy {
            lease.release();
        }
        result
    }

    /// What a finished call amounts to, in the reference runtime's order: an
    /// error the plugin set, a non-zero return, `proc_exit`, then a crash. A
    /// crash after the plugin set an error is still reported and counted (the
    /// caller sees the plugin's error, as with the reference runtime).
    fn conclude(
        &self,
        function: &str,
        request_id: Option<u64>,
        outcome: wasmtime::Result<i32>,
        state: &ExtismState,
        bytes: &[u8],
    ) -> Result<(), CallError> {
        let mut plugin_error = state
            .memory
            .error(bytes)
            .map(|message| CallError::Plugin(String::from_utf8_lossy(message).into_owned()));
        if !is_crash(&outcome) {
            if let Some(error) = plugin_error.take() {
                return Err(error);
            }
        }
        let error = match outcome {
            Ok(0) => return Ok(()),
            Ok(code) => return Err(CallError::NonZeroExit(code)),
            Err(error) => error,
        };
        if let Some(exit) = error.downcast_ref::<I32Exit>() {
            return match exit.0 {
                0 => Ok(()),
                code => Err(CallError::Exit(code)),
            };
        }
        let mut report = CrashReport::from_error(
            &self.shared.name,
            function,
            &error,
            state.budget.timed_out(),
        );
        report.request_id = request_id;
        self.shared.stats.record_crash(&report);
        tracing::warn!(plugin = %self.shared.name, function, kind = report.kind.as_str(), "{report}");
        Err(plugin_error.unwrap_or_else(|| CallError::Crash(Box::new(report))))
    }

    async fn instantiate(&self) -> Result<ExtismInstance> {
        let wasi = if self.shared.needs_wasi {
            Some(crate::wasi::build_context(
                &self.shared.name,
                &self.shared.allowed_paths,
            )?)
        } else {
            None
        };
        let mut store = Store::new(
            self.runtime.engine(),
            ExtismState::new(self.shared.clone(), wasi),
        );
        store.limiter(|s| &mut s.limiter);
        install_epoch_policy(&mut store);
        let ticks = store
            .data_mut()
            .budget
            .start(Some(self.shared.timeout.unwrap_or(INIT_TIMEOUT)));
        store.set_epoch_deadline(ticks);

        let instance = self
            .link(&mut store)
            .await
            .map_err(|e| self.describe_start_failure("instantiation", e))?;
        let mut instance = ExtismInstance {
            store,
            instance,
            exports: FxHashMap::default(),
        };
        instance
            .run_guest_initialisers()
            .await
            .map_err(|e| self.describe_start_failure("start-up", e))?;
        Ok(instance)
    }

    /// Instantiates the kernel, then the dependencies in order, then the main module.
    async fn link(&self, store: &mut Store<ExtismState>) -> wasmtime::Result<Instance> {
        let kernel = self.kernel.instantiate(&mut store.as_context_mut()).await?;
        let mut dependencies = Vec::with_capacity(self.dependencies.len());
        for linked in &self.dependencies {
            let instance = self
                .instantiate_module(store, linked, &kernel, &dependencies)
                .await?;
            dependencies.push(instance);
        }
        self.instantiate_module(store, &self.main, &kernel, &dependencies)
            .await
    }

    async fn instantiate_module(
        &self,
        store: &mut Store<ExtismState>,
        linked: &LinkedModule,
        kernel: &Instance,
        dependencies: &[Instance],
    ) -> wasmtime::Result<Instance> {
        let mut imports = Vec::with_capacity(linked.imports.len());
        for (import, source) in linked.module.imports().zip(&linked.imports) {
            let item = match *source {
                ImportSource::Kernel(index) => {
                    self.kernel
                        .function(&mut store.as_context_mut(), kernel, index)
                }
                ImportSource::Dependency(index) => dependencies[index]
                    .get_export(&mut *store, import.name())
                    .ok_or_else(|| {
                        wasmtime::format_err!(
                            "module `{}` exports no `{}`",
                            import.module(),
                            import.name()
                        )
                    })?,
                ImportSource::Host => {
                    self.linker
                        .get_by_import(&mut *store, &import)
                        .ok_or_else(|| {
                            wasmtime::format_err!(
                                "no host function `{}::{}`",
                                import.module(),
                                import.name()
                            )
                        })?
                }
            };
            imports.push(item);
        }
        Instance::new_async(&mut *store, &linked.module, &imports).await
    }

    fn describe_start_failure(&self, stage: &str, error: wasmtime::Error) -> anyhow::Error {
        CrashReport::start_failure(&self.shared.name, stage, error)
    }
}

/// Whether a call ended in a trap, timeout or host failure (not a return or
/// a `proc_exit`).
fn is_crash(outcome: &wasmtime::Result<i32>) -> bool {
    outcome
        .as_ref()
        .is_err_and(|error| error.downcast_ref::<I32Exit>().is_none())
}

impl ExtismInstance {
    /// The functions a caller may name: exports with an Extism signature,
    /// without WASI's entry points and toolchains' internals (`__...`).
    fn callable_exports(&mut self) -> Vec<String> {
        let mut names: Vec<String> = self
            .instance
            .exports(&mut self.store)
            .filter_map(|e| {
                let name = e.name().to_string();
                let func = e.into_func()?;
                Some((name, func))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .filter(|(name, func)| {
                let ty = func.ty(&self.store);
                let results: Vec<ValType> = ty.results().collect();
                callable_signature(ty.params().len(), &results)
                    && !matches!(name.as_str(), "_start" | "_initialize")
                    && !name.starts_with("__")
            })
            .map(|(name, _)| name)
            .collect();
        names.sort();
        names
    }

    fn export(&mut self, name: &str) -> Result<Export, CallError> {
        if let Some(found) = self.exports.get(name) {
            return Ok(found.clone());
        }
        let func = self
            .instance
            .get_func(&mut self.store, name)
            .ok_or_else(|| CallError::FunctionNotFound {
                name: name.to_string(),
                exports: self.callable_exports(),
            })?;
        let ty = func.ty(&self.store);
        let results: Vec<ValType> = ty.results().collect();
        if !callable_signature(ty.params().len(), &results) {
            return Err(CallError::BadSignature {
                function: name.to_string(),
                signature: ty.to_string(),
            });
        }
        let export = if results.is_empty() {
            Export::ReturnsNothing(func.typed(&self.store).expect("signature checked above"))
        } else {
            Export::ReturnsCode(func.typed(&self.store).expect("signature checked above"))
        };
        self.exports.insert(name.to_string(), export.clone());
        Ok(export)
    }

    /// Runs the language runtime's start-up code once per instance, as the
    /// reference runtime does: `hs_init` for Haskell, otherwise the reactor's
    /// `__wasm_call_ctors` or `_initialize`.
    async fn run_guest_initialisers(&mut self) -> wasmtime::Result<()> {
        // Probe with `get_func` (an Option): a failed typed lookup builds an
        // error, with a backtrace when RUST_BACKTRACE is set, on every instance.
        let store = &mut self.store;
        let instance = self.instance;
        let nullary = |store: &mut Store<ExtismState>, name: &str| {
            let func = instance.get_func(&mut *store, name)?;
            func.typed::<(), ()>(&*store).ok()
        };
        if let Some(hs_init) = instance.get_func(&mut *store, "hs_init") {
            if let Some(init) = nullary(store, "_initialize") {
                init.call_async(&mut *store, ()).await?;
            }
            return hs_init
                .typed::<(i32, i32), ()>(&*store)?
                .call_async(&mut *store, (0, 0))
                .await;
        }
        let init = nullary(store, "__wasm_call_ctors").or_else(|| nullary(store, "_initialize"));
        if let Some(init) = init {
            init.call_async(&mut *store, ()).await?;
        }
        Ok(())
    }
}

fn callable_signature(params: usize, results: &[ValType]) -> bool {
    params == 0
        && (results.is_empty() || (results.len() == 1 && matches!(results[0], ValType::I32)))
}

/// Every import must be satisfiable: an `extism:host/env` function we provide,
/// WASI, an embedder's host function, or another module of the manifest.
fn check_imports(
    module_name: &str,
    module: &Module,
    host_functions: &[HostFunction],
    dependencies: &[&str],
) -> Result<()> {
    for import in module.imports() {
        let from = import.module();
        if dependencies.contains(&from) || wasmgate_runtime::wasi::is_wasi_module(from) {
            continue;
        }
        if from == host_env::MODULE && !host_env::FUNCTIONS.contains(&import.name()) {
            bail!(
                "module `{module_name}` imports `{from}::{}`, which this host does not provide; the plugin may need a newer wasmgate",
                import.name()
            );
        }
        if from == host_env::MODULE {
            continue;
        }
        if from == crate::services::MODULE {
            if !crate::services::FUNCTIONS.contains(&import.name()) {
                bail!(
                    "module `{module_name}` imports `{from}::{}`, which this host does not provide (it has {})",
                    import.name(),
                    crate::services::FUNCTIONS.join(", ")
                );
            }
            continue;
        }
        let defined = host_functions
            .iter()
            .any(|f| f.namespace() == from && f.name() == import.name());
        if !defined && from == "env" && import.name().starts_with("proxy_") {
            bail!(
                "module `{module_name}` is a Proxy-Wasm filter (it imports `env::{}`), not an Extism plugin: it runs in a gateway route's `plugins` (`wasmgate run -c wasmgate.yaml`, docs/gateway.md); `wasmgate check` tells the kinds apart",
                import.name()
            );
        }
        if !defined {
            let kind = match import.ty() {
                ExternType::Func(f) => format!("function {f}"),
                other => format!("{other:?}"),
            };
            bail!(
                "module `{module_name}` imports `{from}::{}` ({kind}), which is not provided: register a host function with that name or add a module named `{from}` to the manifest",
                import.name()
            );
        }
    }
    Ok(())
}

/// Where each import of `module` comes from in a new store. Imports the
/// kernel serves are type-checked here, so a mismatch fails at load.
fn plan_imports(
    module_name: &str,
    module: &Module,
    kernel: &Kernel,
    dependencies: &[&str],
) -> Result<Vec<ImportSource>> {
    module
        .imports()
        .map(|import| {
            if let Some(index) = dependencies.iter().position(|d| *d == import.module()) {
                return Ok(ImportSource::Dependency(index));
            }
            let served = (import.module() == host_env::MODULE)
                .then(|| kernel::serves(import.name()))
                .flatten();
            let Some(index) = served else {
                return Ok(ImportSource::Host);
            };
            match import.ty() {
                ExternType::Func(ty) if kernel.accepts(index, &ty) => {
                    Ok(ImportSource::Kernel(index))
                }
                other => bail!(
                    "module `{module_name}` imports `{}::{}` as {other:?}, but it is {}",
                    import.module(),
                    import.name(),
                    kernel.describe(index)
                ),
            }
        })
        .collect()
}

/// Orders dependency modules so each is instantiated after the modules it imports.
fn order_dependencies(mut pending: Vec<(String, Module)>) -> Result<Vec<(String, Module)>> {
    let mut ordered: Vec<(String, Module)> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let names: Vec<String> = pending.iter().map(|(n, _)| n.clone()).collect();
        let ready = pending.iter().position(|(name, module)| {
            module
                .imports()
                .all(|i| i.module() == name || !names.iter().any(|n| n == i.module()))
        });
        match ready {
            Some(i) => ordered.push(pending.remove(i)),
            None => bail!(
                "the manifest's modules import each other in a cycle: {}",
                names.join(", ")
            ),
        }
    }
    Ok(ordered)
}
