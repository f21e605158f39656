//! The routes section: each route's filter chain (the global filters and
//! its own, each a Proxy-Wasm plugin configured for this route, sorted by
//! priority) and its endpoint.
//!
//! A filter is started (its first instance created and configured) once,
//! and kept by every later build in which it is the same: the same module,
//! route, configuration, limits and services. A reload that changes
//! something else does not start it again: a heavy plugin (Higress's WAF
//! with the OWASP rules takes close to a minute of CPU to start) costs its
//! start only when it changes, its instances and their warm state go on
//! serving, and its counters go on counting, as Envoy keeps a Wasm VM
//! whose configuration a listener update leaves alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmgate_base::histogram::LatencyHistogram;
use wasmgate_config::{FilterRef, GatewayConfig, PluginConfig, RouteConfig};
use wasmgate_proxy_wasm::{FilterConfig, FilterPlugin, Runtime};
use wasmgate_services::Services;

use super::plugins::{filter_config, grants, LoadedPlugin, Plugins};
use super::{background, Problems};
use crate::chain::RouteFilter;
use crate::endpoint::function::Function;
use crate::endpoint::mirror::Mirror;
use crate::gateway::{Endpoint, FilterStarting, Gateway, Route, StartedFilter};
use crate::http_call::UpstreamCaller;
use wasmgate_routing::header_edits::HeaderEditor;
use wasmgate_routing::router::RouteMatcher;
use wasmgate_routing::url_rewrite::UrlRewriter;
use wasmgate_upstream::Upstream;

/// What a route may refer to.
struct Context<'a> {
    config: &'a GatewayConfig,
    plugins: &'a Plugins,
    declared: HashMap<&'a str, &'a PluginConfig>,
    upstreams: &'a HashMap<String, Arc<Upstream>>,
    services: &'a Services,
    runtime: &'a Runtime,
    /// `proxy_http_call` through the upstreams, for every filter.
    caller: Arc<UpstreamCaller>,
    /// The filters of the gateway serving now, by [`filter_key`].
    previous: Option<&'a HashMap<String, StartedFilter>>,
    /// The gateway serving now: its routes' filters serve in place of
    /// their new versions while those start (`background.rs`).
    previous_routes: &'a [Route],
    /// This build's filters, by [`filter_key`]: started or kept.
    started: Mutex<HashMap<String, StartedFilter>>,
    /// How many of them were kept from `previous`.
    kept: AtomicUsize,
    /// Filters left starting in the background.
    starting: Mutex<Vec<FilterStarting>>,
    /// How long a filter's start may hold the build (None: in full).
    start_wait: Option<Duration>,
}

/// What [`build`] makes.
pub(super) struct BuiltRoutes {
    pub routes: Vec<Route>,
    /// Every filter of the routes, by [`filter_key`], for the next build.
    pub filters: HashMap<String, StartedFilter>,
    /// How many of them were kept from the gateway serving before.
    pub filters_kept: usize,
    /// Filters still starting in the background (`background.rs`).
    pub filters_starting: Vec<FilterStarting>,
}

/// Every route of `config`, in order; the ones with a problem are left out
/// (and the problem recorded).
pub(super) async fn build(
    config: &GatewayConfig,
    plugins: &Plugins,
    upstreams: &Arc<HashMap<String, Arc<Upstream>>>,
    services: &Services,
    runtime: &Runtime,
    previous: Option<&Gateway>,
    problems: &mut Problems,
) -> BuiltRoutes {
    let context = Context {
        config,
        plugins,
        declared: config
            .plugins
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect(),
        upstreams,
        services,
        runtime,
        caller: Arc::new(UpstreamCaller::new(upstreams.clone())),
        previous: previous.map(|g| &g.filters),
        previous_routes: previous.map_or(&[], |g| &g.routes),
        started: Mutex::new(HashMap::new()),
        kept: AtomicUsize::new(0),
        starting: Mutex::new(Vec::new()),
        start_wait: background::may_leave_filters()
            .then(|| Duration::from_millis(config.limits.filter_start_wait_ms)),
    };
    let mut routes = Vec::with_capacity(config.routes.len());
    for (i, r) in config.routes.iter().enumerate() {
        let at = wasmgate_config::names::entry("routes", i, &r.name);
        let mut filters = build_filters(&context, r, &at, problems).await;
        let mut endpoint = build_endpoint(&context, r, &at, problems);
        // A filter still starting with no version before to serve in its
        // place: the route answers 503 until the node reloads with it.
        let waiting = (context.starting.lock().expect("starting").iter())
            .filter(|s| s.route == r.name && !s.previous_serves)
            .min_by_key(|s| s.since_ms)
            .map(|s| Endpoint::Starting(s.plugin.clone(), s.since_ms));
        if let (Some(waiting), Some(_)) = (waiting, &endpoint) {
            (filters, endpoint) = (Vec::new(), Some(waiting));
        }
        if let Some(endpoint) = endpoint {
            routes.push(Route {
                name: r.name.as_str().into(),
                matcher: RouteMatcher::new(r),
                filter_names: filters.iter().map(|f| f.plugin.name().into()).collect(),
                filters,
                endpoint,
                responses: Default::default(),
                latency: LatencyHistogram::default(),
                concurrency: r
                    .max_concurrent_requests
                    .map(|n| Arc::new(Semaphore::new(n))),
                rejected: AtomicU64::new(0),
                upgrade: r.upgrade.clone(),
                access_log: r.access_log.unwrap_or(true),
                request_headers: HeaderEditor::new(&r.request_headers),
                response_headers: HeaderEditor::new(&r.response_headers),
                rewrite: UrlRewriter::new(r.rewrite.as_ref()),
                mirrors: (r.mirror.iter())
                    .filter_map(|m| {
                        let upstream = context.upstreams.get(&m.upstream)?.clone();
                        Some(Arc::new(Mirror::new(upstream, m.percent)))
                    })
                    .collect(),
                cors: (r.cors.as_ref()).map(|c| Box::new(wasmgate_routing::cors::Cors::new(c))),
            });
        }
    }
    BuiltRoutes {
        routes,
        filters: context.started.into_inner().expect("started filters"),
        filters_kept: context.kept.into_inner(),
        filters_starting: context.starting.into_inner().expect("starting"),
    }
}

/// The route's chain: the global filters, then its own, each configured
/// for this route; sorted by priority, equal priorities in listing order.
async fn build_filters(
    context: &Context<'_>,
    r: &RouteConfig,
    at: &str,
    problems: &mut Problems,
) -> Vec<RouteFilter> {
    let globals = context
        .config
        .global_plugins
        .iter()
        .enumerate()
        .map(|(j, f)| (format!("global_plugins[{j}]"), f));
    let own = r
        .plugins
        .iter()
        .enumerate()
        .map(|(j, f)| (format!("{at}.plugins[{j}]"), f));
    let mut filters = Vec::new();
    for (field, filter) in globals.chain(own) {
        if let Some(built) = build_filter(context, r, &field, filter, problems).await {
            filters.push(built);
        }
    }
    // Stable: equal priorities keep their listing order.
    filters.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
    filters.into_iter().map(|(_, f)| f).collect()
}

/// One filter of the route, with its plugin's priority.
async fn build_filter(
    context: &Context<'_>,
    r: &RouteConfig,
    field: &str,
    filter: &FilterRef,
    problems: &mut Problems,
) -> Option<(i32, RouteFilter)> {
    let (Some(settings), Some(plugin)) = (
        context.declared.get(filter.plugin.as_str()),
        context.plugins.by_name.get(&filter.plugin),
    ) else {
        // Not loaded: its failure is reported, or it is a component still
        // compiling (`background.rs`), which no filter may be.
        if context
            .plugins
            .compiling
            .iter()
            .any(|(n, _)| n == &filter.plugin)
        {
            problems.add(
                format!("{field}.plugin"),
                format!("`{}` is a wasi:http component: filters must be Proxy-Wasm plugins (use it as a route's `component`)", filter.plugin),
            );
        }
        return None;
    };
    let module = match plugin {
        LoadedPlugin::ProxyWasm { module, .. } => module,
        LoadedPlugin::Extism(_) => {
            problems.add(
                format!("{field}.plugin"),
                format!("`{}` is an Extism plugin: filters must be Proxy-Wasm plugins (use it as a route's `function`)", filter.plugin),
            );
            return None;
        }
        LoadedPlugin::Component(_) => {
            problems.add(
                format!("{field}.plugin"),
                format!("`{}` is a wasi:http component: filters must be Proxy-Wasm plugins (use it as a route's `component`)", filter.plugin),
            );
            return None;
        }
    };
    let filter_config = filter_config(
        settings,
        filter,
        &r.name,
        (context.caller.clone(), grants(settings, context.services)),
        &context.config.limits.proxy_wasm,
    );
    let key = (context.plugins.hashes.get(&filter.plugin))
        .map(|sha256| filter_key(sha256, &filter_config));
    let started = match key.as_deref().map(|key| find_started(context, key)) {
        Some(Found::Kept(kept)) => {
            context.kept.fetch_add(1, Ordering::Relaxed);
            Ok(kept)
        }
        Some(Found::StartedLater(outcome)) => outcome,
        Some(Found::Starting(since_ms)) => {
            let key = key.expect("found by its key");
            return starting_meanwhile(context, r, filter, settings, (key, since_ms));
        }
        Some(Found::Nothing) | None => {
            let (runtime, module) = (context.runtime.clone(), module.clone());
            let caller = context.caller.clone();
            let mut start = tokio::spawn(async move {
                FilterPlugin::from_module(&runtime, &module, filter_config)
                    .await
                    .map(|plugin| StartedFilter { plugin, caller })
                    .map_err(|e| format!("{e:#}"))
            });
            let waited = match (context.start_wait, &key) {
                (Some(wait), Some(_)) => tokio::time::timeout(wait, &mut start).await.ok(),
                _ => Some((&mut start).await),
            };
            match waited {
                Some(done) => {
                    done.unwrap_or_else(|e| Err(format!("starting the filter panicked: {e}")))
                }
                None => {
                    let key = key.expect("only a keyed filter is left starting");
                    tracing::info!(plugin = %filter.plugin, route = %r.name, "the filter is still starting: its route is served by its version before, or answers 503, until it is done, and the node reloads then");
                    let (plugin, route) = (filter.plugin.clone(), r.name.clone());
                    let since_ms = background::start_later(plugin, route, key.clone(), start);
                    return starting_meanwhile(context, r, filter, settings, (key, since_ms));
                }
            }
        }
    };
    let started = match started {
        Ok(started) => started,
        Err(e) => {
            problems.add(field.to_string(), e);
            return None;
        }
    };
    let plugin = started.plugin.clone();
    if let Some(key) = key {
        (context.started.lock().expect("started filters")).insert(key, started);
    }
    Some((
        settings.priority,
        RouteFilter {
            plugin,
            fail: settings.fail,
        },
    ))
}

/// Where a filter of this build comes from, other than a start of its own.
enum Found {
    /// The serving gateway's, unchanged.
    Kept(StartedFilter),
    /// A start a build left running ended: its outcome.
    StartedLater(Result<StartedFilter, String>),
    /// A start a build left is still running, since then (Unix ms).
    Starting(u64),
    Nothing,
}

fn find_started(context: &Context<'_>, key: &str) -> Found {
    if let Some(kept) = context.previous.and_then(|p| p.get(key)) {
        return Found::Kept(kept.clone());
    }
    if let Some(outcome) = background::take_started(key) {
        return Found::StartedLater(outcome);
    }
    match background::filter_starting_since(key) {
        Some(since_ms) => Found::Starting(since_ms),
        None => Found::Nothing,
    }
}

/// A filter left starting: recorded, and in its place the version the
/// serving gateway has on this route, if it has one.
fn starting_meanwhile(
    context: &Context<'_>,
    r: &RouteConfig,
    filter: &FilterRef,
    settings: &PluginConfig,
    (key, since_ms): (String, u64),
) -> Option<(i32, RouteFilter)> {
    let before = (context.previous_routes.iter())
        .find(|route| *route.name == *r.name)
        .and_then(|route| {
            (route.filters.iter()).find(|f| f.plugin.name() == filter.plugin.as_str())
        })
        .map(|f| f.plugin.clone());
    (context.starting.lock().expect("starting")).push(FilterStarting {
        plugin: filter.plugin.clone(),
        route: r.name.clone(),
        since_ms,
        previous_serves: before.is_some(),
        key,
    });
    before.map(|plugin| {
        let fail = settings.fail;
        (settings.priority, RouteFilter { plugin, fail })
    })
}

/// What makes a started filter the same one in another build: its module
/// and every setting it was started with, but where its calls go (its
/// `UpstreamCaller` follows the serving gateway); the services it may use by
/// identity, since a service whose configuration changes is built anew
/// (`build_services`) while an unchanged one is shared.
fn filter_key(module_sha256: &str, config: &FilterConfig) -> String {
    let mut settings = config.clone();
    settings.http_caller = None;
    let services = config.services.addresses();
    format!("{module_sha256} {settings:?} {services:?}")
}

/// The route's endpoint: an upstream, an Extism function, a component, a
/// fixed answer or a redirect.
fn build_endpoint(
    context: &Context<'_>,
    r: &RouteConfig,
    at: &str,
    problems: &mut Problems,
) -> Option<Endpoint> {
    if let Some(name) = &r.upstream {
        return context.upstreams.get(name).cloned().map(Endpoint::Upstream);
    }
    let compiling = |plugin: &str| {
        (context.plugins.compiling.iter())
            .find(|(name, _)| name == plugin)
            .map(|(name, since)| Endpoint::Starting(name.clone(), *since))
    };
    if let Some(c) = &r.component {
        return match context.plugins.by_name.get(&c.plugin) {
            Some(LoadedPlugin::Component(plugin)) => Some(Endpoint::Component(plugin.clone())),
            None => compiling(&c.plugin),
            Some(_) => {
                problems.add(
                    format!("{at}.component.plugin"),
                    format!("`{}` is not a wasi:http component (a component exports wasi:http/incoming-handler)", c.plugin),
                );
                None
            }
        };
    }
    if let Some(redirect) = &r.redirect {
        return Some(Endpoint::Redirect(redirect.clone()));
    }
    let Some(f) = &r.function else {
        return r.respond.clone().map(Endpoint::Respond);
    };
    match context.plugins.by_name.get(&f.plugin) {
        Some(LoadedPlugin::Extism(plugin)) => {
            if let Some(name) = &f.function {
                if !plugin.function_exists(name) {
                    problems.add(
                        format!("{at}.function.function"),
                        format!("plugin `{}` has no callable export `{name}`", f.plugin),
                    );
                }
            }
            Some(Endpoint::Function(Function {
                plugin: plugin.clone(),
                function: f.function.clone(),
            }))
        }
        Some(LoadedPlugin::ProxyWasm { .. }) => {
            problems.add(
                format!("{at}.function.plugin"),
                format!(
                    "`{}` is a Proxy-Wasm filter, not an Extism plugin",
                    f.plugin
                ),
            );
            None
        }
        Some(LoadedPlugin::Component(_)) => {
            problems.add(
                format!("{at}.function.plugin"),
                format!(
                    "`{}` is a wasi:http component, not an Extism plugin (use it as the route's `component`)",
                    f.plugin
                ),
            );
            None
        }
        None => compiling(&f.plugin),
    }
}
