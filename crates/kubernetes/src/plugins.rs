//! WasmPlugin resources to plugins and filter chains (pure, as
//! `translate.rs`): each resource is one plugin of the node's
//! configuration, and a route's chain is every plugin whose scope holds
//! the route, in Istio's and Higress's order (phase, then priority), each
//! with the configuration of its first match rule that names the route or
//! its host, else its default.
//!
//! A plugin that does not load (a registry that refuses, a module that is
//! not wasm) is left out of the configuration rather than rejecting every
//! other change: the routes it applies to answer 500 (`FAIL_CLOSE`) or run
//! without it (`FAIL_OPEN`), and its status says why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kube::ResourceExt;
use serde_json::Value;
use wasmgate_config::grants::NamespaceGrants;
use wasmgate_config::{FilterRef, PluginConfig, RegistryConfig};

use crate::hosts::host_matches;
use crate::model::GROUP;
use crate::pull_secrets::Pulls;
use crate::route_view::RouteKind;
use crate::wasmplugin::{FailStrategy, ImagePullPolicy, Phase, WasmPlugin, WasmPluginKind};

/// What the node's file lets each namespace's WasmPlugins use
/// (`config.kubernetes.grants`, docs/security.md).
#[derive(Default)]
pub struct Tenancy<'a> {
    pub grants: Option<&'a NamespaceGrants>,
    /// The services ConfigMap's namespace and the services it lists: its
    /// own namespace may use them without a grant.
    pub own_services: Option<(&'a str, Vec<String>)>,
    /// The variables the node's own `kubernetes.registry` reads.
    pub registry_env: Vec<&'a str>,
}

impl Tenancy<'_> {
    /// Why a WasmPlugin of `namespace` made into `config` asks for more
    /// than its namespace is granted.
    fn refusal(&self, namespace: &str, config: &PluginConfig) -> Option<String> {
        let grant = (self.grants)
            .and_then(|g| g.get(namespace))
            .cloned()
            .unwrap_or_default();
        let own: &[String] = match &self.own_services {
            Some((ns, names)) if *ns == namespace => names,
            _ => &[],
        };
        let refused = grant.refusals(config, namespace, own, &self.registry_env);
        (!refused.is_empty()).then(|| {
            (refused.iter())
                .map(|(field, why)| format!("spec.{field}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// The node's plugins from WasmPlugin resources, and what routes get.
pub struct WasmPlugins<'a> {
    entries: Vec<Entry<'a>>,
}

struct Entry<'a> {
    resource: &'a WasmPlugin,
    namespace: String,
    /// Whether a route's `ExtensionRef` filter names it: then, without
    /// `targetRefs`, it runs only where it is named.
    named: bool,
    /// The plugin's name in the node's configuration.
    plugin: String,
    /// Why it is not loaded, if it is not.
    broken: Option<String>,
    /// How its `oci://` module is pulled.
    registry: Option<RegistryConfig>,
}

/// Where a route sits: the HTTPRoute or GRPCRoute it came from, the
/// Gateways that accepted it, the one host it is served for (None: any),
/// and the WasmPlugins its rule names in `ExtensionRef` filters.
pub struct RouteContext<'a> {
    pub kind: RouteKind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub gateways: &'a [(String, String)],
    pub host: Option<&'a str>,
    pub named: &'a [&'a str],
}

/// What serves a rule whose backend is a WasmPlugin: the plugin's node
/// name (and the Extism function, if the WasmPlugin names one).
#[derive(Clone, Debug, PartialEq)]
pub enum WasmBackend {
    Component(String),
    Function(String, Option<String>),
}

/// The name a WasmPlugin's plugin has in the node's configuration.
pub fn plugin_name(namespace: &str, name: &str) -> String {
    crate::names::entry_name(&format!("wp.{namespace}.{name}"))
}

impl<'a> WasmPlugins<'a> {
    /// `broken`: plugins (by their node name) that did not load, and why;
    /// `named`: (namespace, name) of those some route's `ExtensionRef`
    /// filter names. A WasmPlugin asking for more than its namespace is
    /// granted (`tenancy`) is broken too, with the reason.
    pub fn new(
        resources: &'a [WasmPlugin],
        broken: &BTreeMap<String, String>,
        named: &BTreeSet<(String, String)>,
        pulls: &Pulls,
        tenancy: &Tenancy,
    ) -> Self {
        let mut entries: Vec<Entry> = (resources.iter())
            .map(|resource| {
                let namespace = resource.namespace().unwrap_or_default();
                let named = named.contains(&(namespace.clone(), resource.name_any()));
                let plugin = plugin_name(&namespace, &resource.name_any());
                let (registry, secret_problem) = match pulls.registry(resource) {
                    Ok(registry) => (registry, None),
                    Err(why) => (None, Some(why)),
                };
                let mut entry = Entry {
                    resource,
                    namespace,
                    named,
                    plugin,
                    broken: None,
                    registry,
                };
                entry.broken = (broken.get(&entry.plugin).cloned())
                    .or_else(|| spec_problem(resource))
                    .or(secret_problem)
                    .or_else(|| tenancy.refusal(&entry.namespace, &plugin_config(&entry)));
                entry
            })
            .collect();
        entries.sort_by_key(|e| {
            let spec = &e.resource.spec;
            (
                spec.phase.unwrap_or(Phase::Unspecified),
                -i64::from(spec.priority.unwrap_or(0)),
                e.namespace.clone(),
                e.resource.name_any(),
            )
        });
        WasmPlugins { entries }
    }

    /// Whether a WasmPlugin of this namespace and name exists.
    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        self.find(namespace, name).is_some()
    }

    fn find(&self, namespace: &str, name: &str) -> Option<&Entry<'a>> {
        (self.entries.iter()).find(|e| e.namespace == namespace && e.resource.name_any() == name)
    }

    /// The endpoint a backendRef to the WasmPlugin `namespace/name` makes,
    /// or the ResolvedRefs reason and message of why it cannot be one.
    pub fn backend(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<WasmBackend, (&'static str, String)> {
        let e = self.find(namespace, name).ok_or_else(|| {
            (
                "BackendNotFound",
                format!("backendRef: no WasmPlugin `{namespace}/{name}`"),
            )
        })?;
        let spec = &e.resource.spec;
        let kind = spec.kind.unwrap_or_default();
        if kind == WasmPluginKind::ProxyWasm {
            return Err((
                "InvalidKind",
                format!("backendRef: WasmPlugin `{namespace}/{name}` is a filter (kind ProxyWasm); a backend is a Component or an Extism plugin"),
            ));
        }
        if let Some(reason) = &e.broken {
            return Err((
                "BackendNotFound",
                format!("backendRef: WasmPlugin `{namespace}/{name}` is not loaded: {reason}"),
            ));
        }
        Ok(match kind {
            WasmPluginKind::Extism => {
                WasmBackend::Function(e.plugin.clone(), spec.function.clone())
            }
            _ => WasmBackend::Component(e.plugin.clone()),
        })
    }

    /// The plugins to load: every resource that is not known broken.
    pub fn configs(&self) -> Vec<PluginConfig> {
        (self.entries.iter())
            .filter(|e| e.broken.is_none())
            .map(|e| plugin_config(e))
            .collect()
    }

    /// The hosts the match rules of the plugins that apply to this route
    /// name (rules that name other routes do not count): the route is
    /// served once per such host, so each gets its own chain. A tenant's
    /// rule for its own route cannot multiply everyone else's routes.
    pub fn domains(&self, route: &RouteContext) -> BTreeSet<String> {
        (self.entries.iter())
            .filter(|e| e.is_filter() && e.in_scope(route))
            .flat_map(|e| {
                (e.resource.spec.match_rules.iter())
                    .filter(move |r| r.route.is_empty() || e.names_route(r, route))
            })
            .flat_map(|r| r.domain.iter().cloned())
            .collect()
    }

    /// The route's filters in the order they run, and the plugins among
    /// them; or, when a `FAIL_CLOSE` plugin that should run is not loaded,
    /// why the route answers 500.
    pub fn chain(&self, route: &RouteContext) -> Result<(Vec<FilterRef>, Vec<String>), String> {
        let mut filters = Vec::new();
        let mut used = Vec::new();
        for e in (self.entries.iter()).filter(|e| e.is_filter() && e.in_scope(route)) {
            let spec = &e.resource.spec;
            let conf = match spec.match_rules.iter().find(|r| e.rule_matches(r, route)) {
                Some(rule) if rule.config_disable == Some(true) => continue,
                Some(rule) => over(&spec.default_config, &rule.config),
                None if spec.default_config_disable == Some(true) => continue,
                None => spec.default_config.clone(),
            };
            used.push(e.plugin.clone());
            if let Some(reason) = &e.broken {
                if spec.fail_strategy == Some(FailStrategy::Open) {
                    continue;
                }
                return Err(format!(
                    "WasmPlugin {}/{} is not loaded (failStrategy FAIL_CLOSE): {reason}",
                    e.namespace,
                    e.resource.name_any()
                ));
            }
            filters.push(FilterRef {
                plugin: e.plugin.clone(),
                conf,
            });
        }
        Ok((filters, used))
    }

    /// Every resource: (namespace, name, generation, node name, broken).
    pub fn resources(
        &self,
    ) -> impl Iterator<Item = (String, String, Option<i64>, &str, Option<&str>)> {
        self.entries.iter().map(|e| {
            (
                e.namespace.clone(),
                e.resource.name_any(),
                e.resource.metadata.generation,
                e.plugin.as_str(),
                e.broken.as_deref(),
            )
        })
    }
}

impl Entry<'_> {
    /// A Proxy-Wasm filter, not a module that serves rules itself.
    fn is_filter(&self) -> bool {
        self.resource.spec.kind.unwrap_or_default() == WasmPluginKind::ProxyWasm
    }

    /// Whether the route is one this plugin may run on: its rule names it
    /// (`ExtensionRef`), or it is one of its targets', else (when no
    /// route names it) one of a Gateway in the plugin's namespace.
    fn in_scope(&self, route: &RouteContext) -> bool {
        if route.namespace == self.namespace
            && route.named.contains(&self.resource.name_any().as_str())
        {
            return true;
        }
        let targets = &self.resource.spec.target_refs;
        if targets.is_empty() {
            return !self.named && route.gateways.iter().any(|(ns, _)| *ns == self.namespace);
        }
        targets.iter().any(|t| {
            let group_ok = t.group.as_deref().is_none_or(|g| g == GROUP);
            match t.kind.as_str() {
                "Gateway" => {
                    group_ok
                        && (route.gateways.iter())
                            .any(|(ns, name)| *ns == self.namespace && *name == t.name)
                }
                kind if kind == route.kind.name() => {
                    group_ok && route.namespace == self.namespace && route.name == t.name
                }
                _ => false,
            }
        })
    }

    /// A rule matches when each list it has matches: `route` names the
    /// route's HTTPRoute, `domain` covers its host.
    /// Whether `rule`'s `route` list names this route.
    fn names_route(&self, rule: &crate::wasmplugin::MatchRule, route: &RouteContext) -> bool {
        rule.route.iter().any(|r| match r.split_once('/') {
            Some((ns, name)) => ns == route.namespace && name == route.name,
            None => self.namespace == route.namespace && r == route.name,
        })
    }

    fn rule_matches(&self, rule: &crate::wasmplugin::MatchRule, route: &RouteContext) -> bool {
        let names_route = || self.names_route(rule, route);
        let covers_host = || {
            route
                .host
                .is_some_and(|h| rule.domain.iter().any(|d| d == h || host_matches(d, h)))
        };
        (rule.route.is_empty() || names_route()) && (rule.domain.is_empty() || covers_host())
    }
}

/// A rule's configuration laid over the default one, key by key, as
/// Higress's framework parses a rule (`ParseOverrideConfig`): a rule that
/// says only `allow: [c1]` keeps the default's `consumers`.
fn over(default: &Option<Value>, rule: &Option<Value>) -> Option<Value> {
    match (default, rule) {
        (Some(Value::Object(base)), Some(Value::Object(top))) => {
            let mut merged = base.clone();
            merged.extend(top.iter().map(|(k, v)| (k.clone(), v.clone())));
            Some(Value::Object(merged))
        }
        (_, Some(rule)) => Some(rule.clone()),
        (default, None) => default.clone(),
    }
}

/// What in the resource keeps it from being a plugin at all.
fn spec_problem(resource: &WasmPlugin) -> Option<String> {
    let url = resource.spec.url.trim();
    if url.is_empty() {
        return Some("spec.url is empty".into());
    }
    let scheme = url.split_once("://").map(|(s, _)| s);
    match scheme {
        None | Some("file" | "http" | "https" | "oci") => None,
        Some(other) => Some(format!(
            "spec.url: `{other}://` is not a scheme wasmgate fetches (oci://, https://, http://, file://)"
        )),
    }
}

fn plugin_config(e: &Entry) -> PluginConfig {
    let spec = &e.resource.spec;
    let url = spec.url.trim();
    let wasm = url.strip_prefix("file://").unwrap_or(url);
    let mut config: PluginConfig =
        serde_json::from_value(serde_json::json!({"name": e.plugin, "wasm": wasm}))
            .expect("a plugin with defaults");
    config.wasm = PathBuf::from(wasm);
    config.sha256 = spec.sha256.clone();
    config.pull = spec.image_pull_policy.map(|p| match p {
        ImagePullPolicy::IfNotPresent => wasmgate_config::PullPolicy::IfNotPresent,
        ImagePullPolicy::Always => wasmgate_config::PullPolicy::Always,
    });
    config.root_id = spec.plugin_name.clone().unwrap_or_default();
    config.fail = match spec.fail_strategy {
        Some(FailStrategy::Open) => wasmgate_config::FailStrategy::Open,
        Some(FailStrategy::Close) | None => wasmgate_config::FailStrategy::Closed,
    };
    config.services = spec.services.clone();
    config.registry = e.registry.clone();
    config.kubernetes_namespace = Some(e.namespace.clone());
    config.kind = match spec.kind.unwrap_or_default() {
        WasmPluginKind::ProxyWasm => wasmgate_config::PluginKind::ProxyWasm,
        WasmPluginKind::Component => wasmgate_config::PluginKind::Component,
        WasmPluginKind::Extism => wasmgate_config::PluginKind::Extism,
    };
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_pulls() -> Pulls<'static> {
        Pulls {
            defaults: None,
            secrets: &[],
            unreadable: &crate::secrets::NONE_UNREADABLE,
        }
    }

    /// What the tests' namespaces may use: modules from anywhere.
    fn trusted() -> NamespaceGrants {
        let everything = wasmgate_config::grants::NamespaceGrant {
            services: Vec::new(),
            files: vec!["/".into()],
        };
        ["gw", "team", "ns"]
            .into_iter()
            .map(|ns| (ns.to_string(), everything.clone()))
            .collect()
    }

    fn wp(name: &str, spec: serde_json::Value) -> WasmPlugin {
        serde_json::from_value(json!({
            "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name, "namespace": "gw"}, "spec": spec
        }))
        .unwrap()
    }

    fn at<'a>(
        ns: &'a str,
        name: &'a str,
        gws: &'a [(String, String)],
        host: Option<&'a str>,
    ) -> RouteContext<'a> {
        RouteContext {
            kind: RouteKind::Http,
            namespace: ns,
            name,
            gateways: gws,
            host,
            named: &[],
        }
    }

    #[test]
    fn chains_run_by_phase_then_priority_with_the_first_matching_rules_config() {
        let grants = trusted();
        let tenancy = Tenancy {
            grants: Some(&grants),
            ..Tenancy::default()
        };
        let all = [
            wp(
                "stats",
                json!({"url": "/p/s.wasm", "phase": "STATS", "priority": 900}),
            ),
            wp(
                "auth",
                json!({"url": "/p/a.wasm", "phase": "AUTHN", "defaultConfig": {"k": 0},
                "matchRules": [{"route": ["shop/orders"], "config": {"k": 1}},
                               {"domain": ["*.internal.example"], "configDisable": true}]}),
            ),
            wp(
                "late",
                json!({"url": "/p/l.wasm", "priority": 5, "defaultConfigDisable": true,
                "matchRules": [{"domain": ["api.example"], "config": {"on": true}}]}),
            ),
            wp("early", json!({"url": "/p/e.wasm", "priority": 50})),
            wp(
                "tenant",
                json!({"url": "/p/t.wasm", "defaultConfigDisable": true,
                "matchRules": [{"route": ["shop/orders"], "domain": ["orders.example"], "config": {}}]}),
            ),
        ];
        let set = WasmPlugins::new(
            &all,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &no_pulls(),
            &tenancy,
        );
        let gws = [("gw".to_string(), "edge".to_string())];
        let (chain, _) = set.chain(&at("shop", "orders", &gws, None)).unwrap();
        let names: Vec<&str> = chain.iter().map(|f| f.plugin.as_str()).collect();
        assert_eq!(names, ["wp.gw.auth", "wp.gw.stats", "wp.gw.early"]);
        assert_eq!(chain[0].conf, Some(json!({"k": 1})));
        let (chain, _) = set
            .chain(&at("shop", "cart", &gws, Some("api.example")))
            .unwrap();
        assert_eq!(chain[0].conf, Some(json!({"k": 0})));
        assert_eq!(chain.last().unwrap().plugin, "wp.gw.late");
        let (chain, _) = set
            .chain(&at("shop", "cart", &gws, Some("a.internal.example")))
            .unwrap();
        assert!(chain.iter().all(|f| f.plugin != "wp.gw.auth"));
        assert_eq!(
            set.domains(&at("shop", "cart", &gws, None)),
            BTreeSet::from(["*.internal.example".into(), "api.example".into()])
        );
        // A rule for another route adds no host variant to this one.
        assert!(set
            .domains(&at("shop", "orders", &gws, None))
            .contains("orders.example"));
        // Routes of a Gateway in another namespace are not in scope.
        let other = [("team".to_string(), "edge".to_string())];
        assert!(set
            .chain(&at("team", "x", &other, None))
            .unwrap()
            .0
            .is_empty());
    }

    #[test]
    fn target_refs_narrow_the_scope_and_a_broken_plugin_fails_closed_or_open() {
        let grants = trusted();
        let tenancy = Tenancy {
            grants: Some(&grants),
            ..Tenancy::default()
        };
        let all = [
            wp(
                "only",
                json!({"url": "oci://r.example/p:1", "targetRefs": [{"kind": "HTTPRoute", "name": "a"}]}),
            ),
            wp(
                "open",
                json!({"url": "ftp://x/y.wasm", "failStrategy": "FAIL_OPEN"}),
            ),
        ];
        let set = WasmPlugins::new(
            &all,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &no_pulls(),
            &tenancy,
        );
        assert_eq!(set.configs().len(), 1, "the ftp:// one is broken");
        let gws = [("gw".to_string(), "edge".to_string())];
        let (chain, _) = set.chain(&at("gw", "a", &gws, None)).unwrap();
        assert_eq!(chain.len(), 1);
        assert!(set.chain(&at("gw", "b", &gws, None)).unwrap().0.is_empty());
        let broken = BTreeMap::from([("wp.gw.only".to_string(), "pull refused".to_string())]);
        let set = WasmPlugins::new(&all, &broken, &BTreeSet::new(), &no_pulls(), &tenancy);
        let err = set.chain(&at("gw", "a", &gws, None)).unwrap_err();
        assert!(
            err.contains("pull refused") && err.contains("gw/only"),
            "{err}"
        );
    }

    #[test]
    fn a_namespace_uses_only_the_services_and_files_it_is_granted() {
        let team = |name: &str, spec: Value| {
            let mut p = wp(name, spec);
            p.metadata.namespace = Some("team".into());
            p
        };
        let all = [
            team(
                "cache",
                json!({"url": "file:///srv/wasm/team/c.wasm", "services": ["redis"]}),
            ),
            team("others", json!({"url": "file:///srv/wasm/other/o.wasm"})),
            team("sneaky", json!({"url": "/srv/wasm/team/../other/o.wasm"})),
            team(
                "db",
                json!({"url": "oci://r.example/db:1", "services": ["pg"]}),
            ),
            wp(
                "stranger",
                json!({"url": "oci://r.example/s:1", "services": ["redis"]}),
            ),
        ];
        let grants = NamespaceGrants::from([(
            "team".to_string(),
            wasmgate_config::grants::NamespaceGrant {
                services: vec!["redis".into()],
                files: vec!["/srv/wasm/team".into()],
            },
        )]);
        let tenancy = Tenancy {
            grants: Some(&grants),
            own_services: Some(("team", vec!["pg".into()])),
            registry_env: Vec::new(),
        };
        let set = WasmPlugins::new(
            &all,
            &BTreeMap::new(),
            &BTreeSet::new(),
            &no_pulls(),
            &tenancy,
        );
        let loaded: Vec<String> = set.configs().into_iter().map(|c| c.name).collect();
        assert_eq!(loaded, ["wp.team.cache", "wp.team.db"], "{loaded:?}");
        let why = |ns: &str, name: &str| {
            let e = set.find(ns, name).unwrap();
            e.broken.clone().unwrap()
        };
        assert!(why("team", "others").contains("not under a granted directory"));
        assert!(why("team", "sneaky").contains("without `.` or `..`"));
        assert!(why("gw", "stranger").contains("service `redis` is not granted to namespace `gw`"));
    }
}
