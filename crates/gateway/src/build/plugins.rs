//! The plugins section: every module fetched (URLs and registries, `wasmgate_oci::fetch`), compiled
//! or found in the compile cache, its `sha256` checked and its ABI told from
//! the binary (a component) or its exports (Proxy-Wasm or Extism).
//! Proxy-Wasm modules are kept compiled (each route configures its own
//! filter from one); Extism plugins and components are ready to call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use wasmgate_component::{ComponentOptions, ComponentPlugin, Preopen};
use wasmgate_config::node::ProxyWasmLimits;
use wasmgate_config::{conf_bytes, FilterRef, GatewayConfig, PluginConfig, PluginKind};
use wasmgate_extism::{Manifest, Plugin, PluginOptions};
use wasmgate_proxy_wasm::{AbiVersion, FilterConfig, HostLimits, HttpCaller, PoolConfig, Runtime};
use wasmgate_runtime::wasmtime::Module;
use wasmgate_runtime::PrecompiledPolicy;
use wasmgate_services::{Grants, Services};

use super::Problems;

/// A loaded plugin: Proxy-Wasm ones are instantiated per route (each route
/// has its own `conf`), so what is kept is the compiled module.
pub(super) enum LoadedPlugin {
    ProxyWasm {
        module: Module,
        abi: AbiVersion,
        unimplemented: Vec<String>,
    },
    Extism(Arc<Plugin>),
    Component(Arc<ComponentPlugin>),
}

/// The plugins of a configuration, as loaded.
pub(super) struct Plugins {
    pub by_name: HashMap<String, LoadedPlugin>,
    /// What each turned out to be, e.g. `proxy-wasm 0.2.1`.
    pub kinds: Vec<(String, String)>,
    /// SHA-256 (hex) of each one's module.
    pub hashes: HashMap<String, String>,
    /// The image each `oci://` module was pulled from, pinned to its digest.
    pub images: HashMap<String, String>,
    /// Host functions each imports that wasmgate does not implement.
    pub unimplemented: Vec<(String, Vec<String>)>,
    /// Components still compiling, with when the build left them (Unix
    /// ms): `background.rs`.
    pub compiling: Vec<(String, u64)>,
}

/// The services `p` was granted, of `services`.
pub(super) fn grants(p: &PluginConfig, services: &Services) -> Grants {
    Grants::new(
        p.services
            .iter()
            .filter_map(|name| services.get(name).cloned())
            .collect(),
    )
}

/// Loads every plugin of `config` (paths relative to `base`).
pub(super) async fn load(
    config: &GatewayConfig,
    base: &Path,
    runtime: &Runtime,
    services: &Services,
    problems: &mut Problems,
) -> Plugins {
    // Modules given by URL or in a registry are fetched first (once; then
    // from the cache), all at once.
    let fetches = config
        .plugins
        .iter()
        .map(|p| wasmgate_oci::fetch::module_file(p, base, runtime.cache_dir()));
    let mut files = Vec::with_capacity(config.plugins.len());
    let mut images = HashMap::new();
    for (p, file) in config.plugins.iter().zip(join_all(fetches).await) {
        files.push(file.map(|file| {
            if let Some(image) = file.image {
                images.insert(p.name.clone(), image);
                (file.path, true)
            } else {
                (file.path, false)
            }
        }));
    }
    // Compiling is the slow part of building (seconds for a Go module):
    // do it on the blocking pool, all plugins at once, so that neither
    // the serving threads nor the control plane's timers wait for it.
    let loads: Vec<_> = config
        .plugins
        .iter()
        .zip(files)
        .map(|(p, file)| {
            // A component a build may go on without (`background.rs`).
            let leave = match &file {
                Ok((path, _)) => (wasmgate_component::is_component_file(path)
                    && super::background::may_leave(path))
                .then(|| path.clone()),
                Err(_) => None,
            };
            let (p, runtime, grants) = (p.clone(), runtime.clone(), grants(p, services));
            let precompiled = precompiled_policy(config, &p);
            let load = tokio::task::spawn_blocking(move || {
                let (file, hash_checked) = file?;
                load_plugin(&p, file, hash_checked, &runtime, grants, precompiled)
            });
            (load, leave)
        })
        .collect();
    let wait = Duration::from_millis(config.limits.component_compile_wait_ms);
    let mut plugins = Plugins {
        by_name: HashMap::new(),
        kinds: Vec::new(),
        hashes: HashMap::new(),
        images,
        unimplemented: Vec::new(),
        compiling: Vec::new(),
    };
    for ((i, p), (mut load, leave)) in config.plugins.iter().enumerate().zip(loads) {
        let load = match leave {
            Some(path) => match tokio::time::timeout(wait, &mut load).await {
                Ok(done) => done,
                Err(_) => {
                    tracing::info!(plugin = %p.name, waited_ms = wait.as_millis() as u64, "the component is still compiling: its routes answer 503 until it is done, and the node reloads then");
                    plugins
                        .compiling
                        .push((p.name.clone(), wasmgate_base::unix_ms()));
                    super::background::finish_later(p.name.clone(), path, load);
                    continue;
                }
            },
            None => load.await,
        };
        let load =
            load.unwrap_or_else(|e| Err(anyhow::anyhow!("loading the plugin panicked: {e}")));
        match load {
            Ok((plugin, hash)) => {
                plugins.hashes.insert(p.name.clone(), hash.clone());
                let kind = match &plugin {
                    LoadedPlugin::ProxyWasm {
                        abi, unimplemented, ..
                    } => {
                        if !unimplemented.is_empty() {
                            plugins
                                .unimplemented
                                .push((p.name.clone(), unimplemented.clone()));
                        }
                        format!("proxy-wasm {abi}")
                    }
                    LoadedPlugin::Extism(_) => "extism".to_string(),
                    LoadedPlugin::Component(_) => "component (wasi:http)".to_string(),
                };
                plugins.kinds.push((p.name.clone(), kind));
                plugins.by_name.insert(p.name.clone(), plugin);
            }
            Err(e) => problems.add(
                wasmgate_config::names::entry("plugins", i, &p.name),
                format!("{e:#}"),
            ),
        }
    }
    plugins
}

impl Plugins {
    /// A component still compiling that the running gateway serves (in an
    /// older version) goes on being served until the new one is ready:
    /// a reload that changes a component makes no route answer 503.
    pub(super) fn keep_previous_while_compiling(&mut self, previous: Option<&crate::Gateway>) {
        let Some(previous) = previous else { return };
        for (name, _) in &self.compiling {
            let Some(component) = previous.components.get(name) else {
                continue;
            };
            tracing::info!(plugin = %name, "the previous version of the component serves until the new one has compiled");
            (self.by_name).insert(name.clone(), LoadedPlugin::Component(component.clone()));
            self.kinds
                .push((name.clone(), "component (wasi:http)".into()));
            if let Some(hash) = previous.plugin_hashes.get(name) {
                self.hashes.insert(name.clone(), hash.clone());
            }
        }
    }

    /// The components loaded, by plugin name.
    pub(super) fn components(&self) -> HashMap<String, Arc<ComponentPlugin>> {
        (self.by_name.iter())
            .filter_map(|(name, plugin)| match plugin {
                LoadedPlugin::Component(c) => Some((name.clone(), c.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Logs, once per plugin and module in this process, the functions a
/// plugin imports that are not part of the ABI wasmgate knows: a node whose
/// configuration changes often (etcd, admin writes) rebuilds its plugins on
/// every change, and the warning is news only once. `wasmgate check` prints
/// them itself instead.
pub fn warn_unimplemented_imports(gateway: &crate::Gateway) {
    static WARNED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    for (name, functions) in &gateway.unimplemented_imports {
        let hash = gateway.plugin_hashes.get(name).cloned().unwrap_or_default();
        let key = (name.clone(), hash);
        if warned.contains(&key) {
            continue;
        }
        warned.push(key);
        tracing::warn!(
            plugin = %name,
            functions = ?functions,
            "the plugin imports host functions that are not part of the Proxy-Wasm ABI wasmgate knows; calling one fails (Unimplemented, or a trap)"
        );
    }
}

/// Precompiled modules (native code) only for plugins the operator's own
/// file declares, when it says `allow_precompiled: true`; never for entries
/// from the admin API or etcd, nor for modules fetched from a URL or pulled
/// from a registry.
fn precompiled_policy(config: &GatewayConfig, p: &PluginConfig) -> PrecompiledPolicy {
    if config.allow_precompiled
        && p.from_operator_file
        && !wasmgate_oci::fetch::is_url(p)
        && !p.is_oci()
    {
        PrecompiledPolicy::Allowed
    } else {
        PrecompiledPolicy::Refused
    }
}

/// Loads `p` from `path`; `hash_checked`: its `sha256` was checked when it
/// was pulled (against the image's digest or the module's).
fn load_plugin(
    p: &PluginConfig,
    path: PathBuf,
    hash_checked: bool,
    runtime: &Runtime,
    grants: Grants,
    precompiled: PrecompiledPolicy,
) -> anyhow::Result<(LoadedPlugin, String)> {
    let check_hash = |hash: [u8; 32]| {
        let hash = hex::encode(hash);
        match &p.sha256 {
            Some(expected) if !hash_checked && !expected.eq_ignore_ascii_case(&hash) => {
                Err(anyhow::anyhow!(
                "{}: sha256 mismatch: the configuration expects {expected}, the module has {hash}: refused (if the module changed on purpose, give its new sha256)",
                path.display()
            ))
            }
            _ => Ok(hash),
        }
    };
    if wasmgate_component::is_component_file(&path) || p.kind == PluginKind::Component {
        let (component, hash) = runtime.load_component_file(&path, precompiled)?;
        let hash = check_hash(hash)?;
        let plugin = ComponentPlugin::new(runtime, &component, component_options(p)?)
            .with_context(|| path.display().to_string())?;
        return Ok((LoadedPlugin::Component(Arc::new(plugin)), hash));
    }
    let (module, hash) = runtime.load_module_file(&path, precompiled)?;
    let hash = check_hash(hash)?;
    load_module_as(p, &path, module, runtime, grants, precompiled).map(|plugin| (plugin, hash))
}

/// What a component gets: its limits and grants (nothing by default).
fn component_options(p: &PluginConfig) -> anyhow::Result<ComponentOptions> {
    anyhow::ensure!(
        p.services.is_empty(),
        "services are not available to components yet (only to Extism plugins and Proxy-Wasm filters)"
    );
    Ok(ComponentOptions {
        name: p.name.clone(),
        memory_limit: p.memory_limit_mb.map(|mib| (mib as usize) << 20),
        timeout: Some(Duration::from_millis(p.timeout_ms.unwrap_or(30_000))),
        allowed_hosts: p.allowed_hosts.clone(),
        preopens: (p.allowed_paths.iter())
            .map(|(host, guest)| Preopen::new(host, guest))
            .collect(),
        env: p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        pool: pool_config(p),
    })
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
        (PluginKind::Component, _) => unreachable!("components are loaded by load_plugin"),
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
        idle_timeout: Some(Duration::from_millis(p.pool_idle_timeout_ms)),
    }
}

pub(super) fn filter_config(
    p: &PluginConfig,
    filter: &FilterRef,
    route: &str,
    (caller, services): (Arc<dyn HttpCaller>, Grants),
    limits: &ProxyWasmLimits,
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
        startup_memory_limit: p.startup_memory_limit_mb.map(|mib| (mib as usize) << 20),
        timeout: Some(Duration::from_millis(p.timeout_ms.unwrap_or(1000))),
        startup_timeout: p.startup_timeout_ms.map(Duration::from_millis),
        pool: pool_config(p),
        limits: host_limits(limits),
    }
}

/// `limits.proxy_wasm`, as the Proxy-Wasm host takes it.
fn host_limits(l: &ProxyWasmLimits) -> HostLimits {
    HostLimits {
        call_reply_bytes: l.call_reply_bytes,
        calls_in_flight: l.calls_in_flight,
        grpc_send_queue_bytes: l.grpc_send_queue_bytes,
        grpc_send_queue_messages: l.grpc_send_queue_messages,
        grpc_receive_bytes: l.grpc_receive_bytes,
        shared_data_value_bytes: l.shared_data_value_bytes,
        shared_data_bytes: l.shared_data_bytes,
        shared_data_keys: l.shared_data_keys,
        shared_queues: l.shared_queues,
        shared_queue_items: l.shared_queue_items,
        shared_queue_bytes: l.shared_queue_bytes,
    }
}
