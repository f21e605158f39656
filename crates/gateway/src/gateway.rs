//! A gateway built from its configuration: plugins loaded and checked,
//! upstreams connected, routes compiled. Building is all-or-nothing: every
//! error is collected with the field it comes from, and a gateway that
//! builds is one that can serve.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmgate_extism::{Manifest, Plugin, PluginOptions};
use wasmgate_proxy_wasm::{
    AbiVersion, FilterConfig, FilterPlugin, HttpCaller, PoolConfig, Runtime,
};

use wasmgate_runtime::wasmtime::Module;
use wasmgate_runtime::{LatencyHistogram, PluginStats, PoolStats, PrecompiledPolicy};
use wasmgate_services::{Grants, Services};

use crate::chain::RouteFilter;
use crate::router::{RouteIndex, RouteMatcher};
use crate::upstream::{Upstream, UpstreamCaller};
use wasmgate_config::{
    conf_bytes, ConfigError, ConfigErrors, FilterRef, FixedResponse, GatewayConfig, PluginConfig,
    PluginKind,
};

pub struct Gateway {
    pub(crate) routes: Vec<Route>,
    /// Finds a request's route without walking `routes`.
    pub(crate) route_index: RouteIndex,
    pub(crate) upstreams: Arc<HashMap<String, Arc<Upstream>>>,
    pub(crate) config: GatewayConfig,
    /// What each declared plugin turned out to be, e.g. `proxy-wasm 0.2.1`.
    pub plugin_kinds: Vec<(String, String)>,
    /// SHA-256 (hex) of each plugin's module: which binary is serving.
    plugin_hashes: HashMap<String, String>,
    /// Host functions a plugin imports that wasmgate does not implement
    /// (calls to them fail), by plugin: what `wasmgate check` warns about.
    pub unimplemented_imports: Vec<(String, Vec<String>)>,
    /// The services its plugins were granted, with their pools.
    services: Services,
}

impl AsRef<RouteMatcher> for Route {
    fn as_ref(&self) -> &RouteMatcher {
        &self.matcher
    }
}

pub(crate) struct Route {
    pub name: String,
    pub matcher: RouteMatcher,
    /// Sorted: priority (high first), then listing (global plugins first).
    pub filters: Vec<RouteFilter>,
    pub endpoint: Endpoint,
    /// Responses by status class (1xx..5xx), for `/metrics`.
    pub responses: [AtomicU64; 5],
    /// Time from the request's arrival to its response headers.
    pub latency: LatencyHistogram,
    /// `max_concurrent_requests`: one permit per request being served.
    pub concurrency: Option<Arc<Semaphore>>,
    /// Requests turned away by the concurrency limit.
    pub rejected: AtomicU64,
}

impl Route {
    pub fn count(&self, status: hyper::StatusCode) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) enum Endpoint {
    Upstream(Arc<Upstream>),
    Function {
        plugin: Arc<Plugin>,
        function: Option<String>,
    },
    Respond(FixedResponse),
}

/// A loaded plugin: Proxy-Wasm ones are instantiated per route (each route
/// has its own `conf`), so what is kept is the compiled module.
enum LoadedPlugin {
    ProxyWasm {
        module: Module,
        abi: AbiVersion,
        unimplemented: Vec<String>,
    },
    Extism(Arc<Plugin>),
}

impl Gateway {
    /// Loads every plugin and builds every route of `config` (read from
    /// `file`). Services whose configuration is as in `previous` (the
    /// gateway serving now, if any) are shared with it, connections and
    /// all; `previous` itself is not changed.
    pub async fn build(
        config: GatewayConfig,
        file: &Path,
        runtime: &Runtime,
        previous: Option<&Gateway>,
    ) -> Result<Gateway, ConfigErrors> {
        let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut errors = Vec::new();
        let mut error = |field: String, message: String| {
            errors.push(ConfigError {
                file: file.to_path_buf(),
                field,
                message,
            })
        };
        let no_services = Services::new();
        let running = previous.map_or(&no_services, |g| &g.services);
        let services = match Services::build(&config.services, running) {
            Ok(built) => built,
            Err((name, message)) => {
                let i = config
                    .services
                    .iter()
                    .position(|s| s.name == name)
                    .unwrap_or(0);
                error(format!("services[{i}] ({name})"), message);
                Services::new()
            }
        };
        let grants = |p: &PluginConfig| {
            Grants::new(
                p.services
                    .iter()
                    .filter_map(|name| services.get(name).cloned())
                    .collect(),
            )
        };
        let upstreams: HashMap<String, Arc<Upstream>> = config
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), Upstream::new(u)))
            .collect();
        let upstreams = Arc::new(upstreams);
        let caller: Arc<dyn HttpCaller> = Arc::new(UpstreamCaller {
            upstreams: upstreams.clone(),
        });

        // Modules given by URL are fetched first (once; then from the cache).
        let mut files = Vec::with_capacity(config.plugins.len());
        for p in &config.plugins {
            files.push(crate::plugin_fetch::module_file(p, &base, runtime.cache_dir()).await);
        }
        // Compiling is the slow part of building (seconds for a Go module):
        // do it on the blocking pool, all plugins at once, so that neither
        // the serving threads nor the control plane's timers wait for it.
        let loads: Vec<_> = config
            .plugins
            .iter()
            .zip(files)
            .map(|(p, file)| {
                let (p, runtime, grants) = (p.clone(), runtime.clone(), grants(p));
                let precompiled = precompiled_policy(&config, &p);
                tokio::task::spawn_blocking(move || {
                    load_plugin(&p, file?, &runtime, grants, precompiled)
                })
            })
            .collect();
        let mut loaded = HashMap::new();
        let mut plugin_kinds = Vec::new();
        let mut plugin_hashes = HashMap::new();
        let mut unimplemented_imports = Vec::new();
        for ((i, p), load) in config.plugins.iter().enumerate().zip(loads) {
            let load = load
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("loading the plugin panicked: {e}")));
            match load {
                Ok((plugin, hash)) => {
                    plugin_hashes.insert(p.name.clone(), hash.clone());
                    let kind = match &plugin {
                        LoadedPlugin::ProxyWasm {
                            abi, unimplemented, ..
                        } => {
                            if !unimplemented.is_empty() && first_warning(&p.name, &hash) {
                                tracing::warn!(
                                    plugin = %p.name,
                                    functions = ?unimplemented,
                                    "the plugin imports host functions wasmgate does not implement; calling one fails (Unimplemented, or a trap)"
                                );
                                unimplemented_imports.push((p.name.clone(), unimplemented.clone()));
                            }
                            format!("proxy-wasm {abi}")
                        }
                        LoadedPlugin::Extism(_) => "extism".to_string(),
                    };
                    plugin_kinds.push((p.name.clone(), kind));
                    loaded.insert(p.name.clone(), plugin);
                }
                Err(e) => error(format!("plugins[{i}] ({})", p.name), format!("{e:#}")),
            }
        }
        let declared: HashMap<&str, &PluginConfig> = config
            .plugins
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();

        let mut routes = Vec::new();
        for (i, r) in config.routes.iter().enumerate() {
            let at = format!("routes[{i}]");
            let mut filters = Vec::new();
            let refs = config
                .global_plugins
                .iter()
                .map(|f| ("global_plugins".to_string(), f))
                .enumerate()
                .chain(
                    r.plugins
                        .iter()
                        .map(|f| (format!("{at}.plugins"), f))
                        .enumerate(),
                );
            for (j, (section, filter)) in refs {
                let field = format!("{section}[{j}]");
                let (Some(settings), Some(plugin)) = (
                    declared.get(filter.plugin.as_str()),
                    loaded.get(&filter.plugin),
                ) else {
                    continue; // already reported
                };
                let LoadedPlugin::ProxyWasm { module, .. } = plugin else {
                    error(
                        format!("{field}.plugin"),
                        format!("`{}` is an Extism plugin: filters must be Proxy-Wasm plugins (use it as a route's `function`)", filter.plugin),
                    );
                    continue;
                };
                let filter_config =
                    filter_config(settings, filter, &r.name, caller.clone(), grants(settings));
                match FilterPlugin::from_module(runtime, module, filter_config).await {
                    Ok(plugin) => filters.push((
                        settings.priority,
                        RouteFilter {
                            plugin,
                            fail: settings.fail,
                        },
                    )),
                    Err(e) => error(field, format!("{e:#}")),
                }
            }
            // Stable: equal priorities keep their listing order.
            filters.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
            let endpoint = if let Some(name) = &r.upstream {
                upstreams.get(name).cloned().map(Endpoint::Upstream)
            } else if let Some(f) = &r.function {
                match loaded.get(&f.plugin) {
                    Some(LoadedPlugin::Extism(plugin)) => {
                        if let Some(name) = &f.function {
                            if !plugin.function_exists(name) {
                                error(
                                    format!("{at}.function.function"),
                                    format!(
                                        "plugin `{}` has no callable export `{name}`",
                                        f.plugin
                                    ),
                                );
                            }
                        }
                        Some(Endpoint::Function {
                            plugin: plugin.clone(),
                            function: f.function.clone(),
                        })
                    }
                    Some(LoadedPlugin::ProxyWasm { .. }) => {
                        error(
                            format!("{at}.function.plugin"),
                            format!(
                                "`{}` is a Proxy-Wasm filter, not an Extism plugin",
                                f.plugin
                            ),
                        );
                        None
                    }
                    None => None,
                }
            } else {
                r.respond.clone().map(Endpoint::Respond)
            };
            if let Some(endpoint) = endpoint {
                routes.push(Route {
                    name: r.name.clone(),
                    matcher: RouteMatcher::new(r),
                    filters: filters.into_iter().map(|(_, f)| f).collect(),
                    endpoint,
                    responses: Default::default(),
                    latency: LatencyHistogram::default(),
                    concurrency: r
                        .max_concurrent_requests
                        .map(|n| Arc::new(Semaphore::new(n))),
                    rejected: AtomicU64::new(0),
                });
            }
        }
        if errors.is_empty() {
            Ok(Gateway {
                route_index: RouteIndex::new(routes.iter().map(|r| &r.matcher)),
                routes,
                upstreams,
                config,
                plugin_kinds,
                plugin_hashes,
                unimplemented_imports,
                services,
            })
        } else {
            Err(ConfigErrors(errors))
        }
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The services its plugins may use, with their pools.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// SHA-256 of the module plugin `name` was loaded from.
    pub fn plugin_hash(&self, name: &str) -> Option<&str> {
        self.plugin_hashes.get(name).map(String::as_str)
    }

    /// Every plugin instance set serving: one per (filter, route) since
    /// each route configures its filters apart, one per Extism plugin used
    /// as a function (shared by the routes that call it).
    pub fn plugin_sets(&self) -> Vec<PluginSet<'_>> {
        let mut sets = Vec::new();
        let mut functions: Vec<&Arc<Plugin>> = Vec::new();
        for route in &self.routes {
            for filter in &route.filters {
                sets.push(PluginSet {
                    name: filter.plugin.name(),
                    route: Some(&route.name),
                    stats: filter.plugin.stats(),
                    pool: filter.plugin.status(),
                });
            }
            if let Endpoint::Function { plugin, .. } = &route.endpoint {
                if !functions.iter().any(|p| Arc::ptr_eq(p, plugin)) {
                    functions.push(plugin);
                    sets.push(PluginSet {
                        name: plugin.name(),
                        route: None,
                        stats: plugin.stats(),
                        pool: plugin.status().pool,
                    });
                }
            }
        }
        sets
    }
}

/// One plugin's instances on one route (or on every route, for a function).
pub struct PluginSet<'a> {
    pub name: &'a str,
    pub route: Option<&'a str>,
    pub stats: &'a PluginStats,
    pub pool: PoolStats,
}

/// Where a plugin's module is, for a configuration in directory `base`.
pub(crate) fn plugin_path(base: &Path, p: &PluginConfig) -> PathBuf {
    resolve(base, &p.wasm)
}

fn resolve(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

/// Loads plugin `p` from `path`; returns it with the SHA-256 of its module,
/// which must be `p.sha256` when that is given.
/// Whether this process has not yet warned about plugin `name` built from
/// the module with `hash`: a node whose configuration changes often (etcd,
/// admin writes) rebuilds its plugins on every change, and the warning is
/// news only once.
fn first_warning(name: &str, hash: &str) -> bool {
    static WARNED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().expect("warned plugins");
    let key = (name.to_string(), hash.to_string());
    if warned.contains(&key) {
        return false;
    }
    warned.push(key);
    true
}

/// Precompiled modules (native code) only for plugins the operator's own
/// file declares, when it says `allow_precompiled: true`; never for entries
/// from the admin API or etcd, nor for modules fetched from a URL.
fn precompiled_policy(config: &GatewayConfig, p: &PluginConfig) -> PrecompiledPolicy {
    if config.allow_precompiled && p.from_operator_file && !crate::plugin_fetch::is_url(p) {
        PrecompiledPolicy::Allowed
    } else {
        PrecompiledPolicy::Refused
    }
}

fn load_plugin(
    p: &PluginConfig,
    path: PathBuf,
    runtime: &Runtime,
    grants: Grants,
    precompiled: PrecompiledPolicy,
) -> anyhow::Result<(LoadedPlugin, String)> {
    let (module, hash) = runtime.load_module_file(&path, precompiled)?;
    let hash = hex::encode(hash);
    if let Some(expected) = &p.sha256 {
        if !expected.eq_ignore_ascii_case(&hash) {
            anyhow::bail!(
                "{}: sha256 mismatch: the configuration expects {expected}, the module has {hash}",
                path.display()
            );
        }
    }
    load_module_as(p, &path, module, runtime, grants, precompiled).map(|plugin| (plugin, hash))
}

fn load_module_as(
    p: &PluginConfig,
    path: &Path,
    module: Module,
    runtime: &Runtime,
    grants: Grants,
    precompiled: PrecompiledPolicy,
) -> anyhow::Result<LoadedPlugin> {
    let abi = AbiVersion::detect(module.exports().map(|e| e.name()));
    let kind = match (p.kind, &abi) {
        (PluginKind::Auto, Ok(_)) | (PluginKind::ProxyWasm, _) => PluginKind::ProxyWasm,
        (PluginKind::Auto, Err(_)) | (PluginKind::Extism, _) => PluginKind::Extism,
    };
    if kind == PluginKind::ProxyWasm {
        let abi = abi.map_err(|reason| anyhow::anyhow!("{}: {reason}", path.display()))?;
        let unimplemented =
            wasmgate_proxy_wasm::host_env::unimplemented_imports(runtime.engine(), &module);
        return Ok(LoadedPlugin::ProxyWasm {
            module,
            abi,
            unimplemented,
        });
    }
    let mut manifest = Manifest::from_wasm_file(path.to_path_buf());
    manifest.config = p.config.clone();
    if !p.allowed_hosts.is_empty() {
        manifest.allowed_hosts = Some(p.allowed_hosts.clone());
    }
    if !p.allowed_paths.is_empty() {
        manifest.allowed_paths = Some(
            p.allowed_paths
                .iter()
                .map(|(host, guest)| (host.clone(), PathBuf::from(guest)))
                .collect(),
        );
    }
    manifest.memory.max_pages = p.memory_limit_mb.map(|mib| (mib * 16) as u32);
    manifest.timeout_ms = Some(p.timeout_ms.unwrap_or(30_000));
    let plugin = Plugin::new(
        runtime,
        &manifest,
        PluginOptions {
            name: Some(p.name.clone()),
            pool: pool_config(p),
            host_functions: Vec::new(),
            services: grants,
            precompiled,
        },
    )?;
    Ok(LoadedPlugin::Extism(Arc::new(plugin)))
}

fn pool_config(p: &PluginConfig) -> PoolConfig {
    PoolConfig {
        max_instances: p.pool_size,
        isolation: false,
        acquire_timeout: Duration::from_millis(p.queue_timeout_ms),
    }
}

fn filter_config(
    p: &PluginConfig,
    filter: &FilterRef,
    route: &str,
    caller: Arc<dyn HttpCaller>,
    services: Grants,
) -> FilterConfig {
    FilterConfig {
        name: p.name.clone(),
        vm_configuration: conf_bytes(&p.vm_config),
        plugin_configuration: conf_bytes(&filter.conf),
        root_id: p.root_id.clone(),
        vm_id: p.vm_id.clone().unwrap_or_else(|| p.name.clone()),
        route: route.to_string(),
        http_caller: Some(caller),
        services,
        memory_limit: p.memory_limit_mb.map(|mib| (mib as usize) << 20),
        timeout: Some(Duration::from_millis(p.timeout_ms.unwrap_or(1000))),
        pool: pool_config(p),
    }
}
