//! The gateway `wasmgate run` serves: its routes (each with its filters and
//! endpoint), upstreams, plugins and services, as built from one
//! configuration (`build/`), and what operations may read of it. A reload
//! builds a new one beside it (`reload.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;
use wasmgate_component::ComponentPlugin;
use wasmgate_config::{GatewayConfig, PluginConfig};
use wasmgate_extism::Plugin;
use wasmgate_proxy_wasm::FilterPlugin;
use wasmgate_runtime::{LatencyHistogram, PluginStats, PoolStats};
use wasmgate_services::Services;

use crate::chain::RouteFilter;
use crate::endpoint::function::Function;
pub(crate) use crate::endpoint::Endpoint;
use crate::http_call::UpstreamCaller;
use wasmgate_routing::router::{RouteIndex, RouteMatcher};
use wasmgate_transport::tls::TlsAcceptorConfig;
use wasmgate_upstream::Upstream;

pub struct Gateway {
    pub(crate) routes: Vec<Route>,
    /// Finds a request's route without walking `routes`.
    pub(crate) route_index: RouteIndex,
    pub(crate) upstreams: Arc<HashMap<String, Arc<Upstream>>>,
    pub(crate) config: GatewayConfig,
    /// What each declared plugin turned out to be, e.g. `proxy-wasm 0.2.1`.
    pub plugin_kinds: Vec<(String, String)>,
    /// SHA-256 (hex) of each plugin's module: which binary is serving.
    pub(crate) plugin_hashes: HashMap<String, String>,
    /// The image each `oci://` plugin was pulled from, pinned to the digest
    /// its tag resolved to.
    pub(crate) plugin_images: HashMap<String, String>,
    /// Host functions a plugin imports that wasmgate does not implement
    /// (calls to them fail), by plugin: what `wasmgate check` warns about.
    pub unimplemented_imports: Vec<(String, Vec<String>)>,
    /// Components still compiling when it was built (name, since: Unix
    /// ms); their routes answer 503 until a reload has them, or are served
    /// by the version before if there was one (`build/background.rs`).
    pub compiling: Vec<(String, u64)>,
    /// The components it serves, by plugin name (what a reload that leaves
    /// one compiling serves meanwhile).
    pub(crate) components: HashMap<String, Arc<wasmgate_component::ComponentPlugin>>,
    /// Every route's filters as started, by what makes them the same
    /// (`build/routes.rs`): what the next build keeps instead of starting
    /// them again.
    pub(crate) filters: HashMap<String, StartedFilter>,
    /// How many of those were kept from the gateway serving before it.
    pub filters_kept: usize,
    /// Filters still starting in the background when it was built
    /// (`build/background.rs`).
    pub filters_starting: Vec<FilterStarting>,
    /// The services its plugins were granted, with their pools.
    pub(crate) services: Services,
    /// What each TLS listener accepts with, by its configured address.
    pub(crate) tls: Vec<(String, TlsAcceptorConfig)>,
    /// The certificates it serves.
    pub certificates: Vec<CertificateInfo>,
    /// TLS listeners (by address) that name certificates the configuration
    /// lacks, with what that means for their handshakes: a cluster node
    /// may start before its certificates are written (docs/tls.md).
    pub(crate) listener_problems: Vec<(String, String)>,
}

/// A route's filter as started: the plugin and the caller its
/// `proxy_http_call`s go through.
#[derive(Clone)]
pub(crate) struct StartedFilter {
    pub plugin: Arc<FilterPlugin>,
    pub caller: Arc<UpstreamCaller>,
}

/// A route's filter whose start a build left running in the background.
#[derive(Clone, Debug)]
pub struct FilterStarting {
    pub plugin: String,
    pub route: String,
    /// Since when (Unix ms).
    pub since_ms: u64,
    /// Whether the filter's version before serves meanwhile (else the
    /// route answers 503 `plugin_starting`).
    pub previous_serves: bool,
    /// What makes the filter the same one (`build/routes.rs`).
    pub(crate) key: String,
}

/// What operators see of a certificate served: its names and expiry.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CertificateInfo {
    pub name: String,
    /// Names it is served for (exact and `*.` wildcards).
    pub names: Vec<String>,
    pub subject: String,
    /// Seconds since the epoch.
    pub not_after: i64,
}

impl AsRef<RouteMatcher> for Route {
    fn as_ref(&self) -> &RouteMatcher {
        &self.matcher
    }
}

pub(crate) struct Route {
    /// Shared with the access-log lines of its requests.
    pub name: Arc<str>,
    pub matcher: RouteMatcher,
    /// Sorted: priority (high first), then listing (global plugins first).
    pub filters: Vec<RouteFilter>,
    /// Their plugins' names, shared with each request's chain notes.
    pub filter_names: Arc<[Arc<str>]>,
    pub endpoint: Endpoint,
    /// Responses by status class (1xx..5xx), for `/metrics`.
    pub responses: [AtomicU64; 5],
    /// Time from the request's arrival to its response headers.
    pub latency: LatencyHistogram,
    /// `max_concurrent_requests`: one permit per request being served.
    pub concurrency: Option<Arc<Semaphore>>,
    /// Requests turned away by the concurrency limit.
    pub rejected: AtomicU64,
    /// The upgrades (WebSocket) it tunnels to its upstream.
    pub upgrade: wasmgate_config::UpgradeConfig,
    /// Whether its requests get access-log lines (when the node keeps a log).
    pub access_log: bool,
    /// Its own header changes, when it has any.
    pub request_headers: Option<Box<wasmgate_routing::header_edits::HeaderEditor>>,
    pub response_headers: Option<Box<wasmgate_routing::header_edits::HeaderEditor>>,
    /// Its own URL changes, when it has any.
    pub rewrite: Option<Box<wasmgate_routing::url_rewrite::UrlRewriter>>,
    /// Upstreams that get copies of its requests (`mirror`).
    pub mirrors: Vec<Arc<crate::endpoint::mirror::Mirror>>,
    /// The cross-origin requests it allows, when it says.
    pub cors: Option<Box<wasmgate_routing::cors::Cors>>,
}

impl Route {
    pub fn count(&self, status: hyper::StatusCode) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }
}

impl Gateway {
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Points every filter's calls at this gateway's upstreams, those kept
    /// from earlier builds included: done as it starts serving
    /// (`LiveGateway::swap`).
    pub(crate) fn take_over_filter_calls(&self) {
        for filter in self.filters.values() {
            filter.caller.call_through(&self.upstreams);
        }
    }

    /// What the TLS listener configured at `address` accepts with.
    pub fn tls_acceptor(&self, address: &str) -> Option<TlsAcceptorConfig> {
        self.tls
            .iter()
            .find(|(a, _)| a == address)
            .map(|(_, acceptor)| acceptor.clone())
    }

    /// The services its plugins may use, with their pools.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Why the TLS listener at `address` cannot serve every name it is
    /// meant to, if it cannot: for `/status` and the dashboard.
    pub fn listener_problem(&self, address: &str) -> Option<&str> {
        self.listener_problems
            .iter()
            .find(|(a, _)| a == address)
            .map(|(_, problem)| problem.as_str())
    }

    /// SHA-256 of the module plugin `name` was loaded from.
    pub fn plugin_hash(&self, name: &str) -> Option<&str> {
        self.plugin_hashes.get(name).map(String::as_str)
    }

    /// The image plugin `name` was pulled from, pinned to its digest
    /// (`oci://registry/repository:tag@sha256:...`), if it is from a registry.
    pub fn plugin_image(&self, name: &str) -> Option<&str> {
        self.plugin_images.get(name).map(String::as_str)
    }

    /// Pins each `oci://` module of `plugins` to the digest its tag
    /// resolved to when this gateway was built: what a cluster publishes,
    /// so that every node pulls the same bytes even if the tag moves.
    pub fn pin_images(&self, plugins: &mut [wasmgate_config::PluginConfig]) {
        for p in plugins.iter_mut().filter(|p| p.is_oci()) {
            if let Some(image) = self.plugin_images.get(&p.name) {
                p.wasm = image.into();
            }
        }
    }

    /// Every plugin instance set serving: one per (filter, route) since
    /// each route configures its filters apart, one per Extism plugin used
    /// as a function and one per component (each shared by the routes
    /// that call it).
    pub fn plugin_sets(&self) -> Vec<PluginSet<'_>> {
        let mut sets = Vec::new();
        let mut functions: Vec<&Arc<Plugin>> = Vec::new();
        let mut components: Vec<&Arc<ComponentPlugin>> = Vec::new();
        for route in &self.routes {
            for filter in &route.filters {
                sets.push(PluginSet {
                    name: filter.plugin.name(),
                    route: Some(&route.name),
                    stats: filter.plugin.stats(),
                    pool: filter.plugin.status(),
                });
            }
            if let Endpoint::Function(Function { plugin, .. }) = &route.endpoint {
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
            if let Endpoint::Component(plugin) = &route.endpoint {
                if !components.iter().any(|p| Arc::ptr_eq(p, plugin)) {
                    components.push(plugin);
                    sets.push(PluginSet {
                        name: plugin.name(),
                        route: None,
                        stats: plugin.stats(),
                        pool: plugin.pool_stats(),
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
    wasmgate_base::paths::resolve(base, &p.wasm)
}
