//! wasmgate's configuration (`wasmgate.yaml`): its shape, how it is read,
//! its defaults, and the checks that need more than one field, each section
//! in a module of its own. Every error names the file and the field
//! (`routes[1].upstream`). The JSON Schema printed by `wasmgate schema` is
//! derived from these types.
//!
//! A leaf: nothing here knows the running gateway, its reloads or its admin
//! API. They (and the cluster's etcd layout) read and write these types.
//!
//! - [`node`]: the node's own settings (listeners, admin, limits, source).
//! - [`plugins`], [`upstreams`], [`routes`]: the shared configuration;
//!   services are `wasmgate_services::ServiceConfig`.
//! - [`names`]: the one rule for names, and [`NamedEntry`].
//! - [`admin_changes`]: what the admin API changed, kept beside the file.

pub mod admin_changes;
mod errors;
pub mod etcd_access;
pub mod grants;
pub mod names;
pub mod node;
pub mod plugins;
pub mod rewrite;
pub mod routes;
pub mod secrets;
pub mod tls;
pub mod upstreams;

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use admin_changes::{admin_file_path, AdminChanges};
pub(crate) use errors::parse_yaml;
pub use errors::{ConfigError, ConfigErrors};
pub use etcd_access::{Encryption, EncryptionKey, EtcdAuth, EtcdTls};
use names::unique_names;
pub use names::{check_name, NamedEntry};
pub use node::{
    check_tracing, AccessLogConfig, AccessLogFormat, ConfigSource, KubernetesSource, Limits,
    OtlpProtocol, TracingConfig, ADMIN_TOKEN_ENV,
};
pub use plugins::{
    conf_bytes, FailStrategy, FilterRef, PluginConfig, PluginKind, PullPolicy, RegistryConfig,
};
pub use rewrite::{ReplacePrefix, Rewrite};
pub use routes::{
    ComponentEndpoint, CorsConfig, FixedResponse, FunctionEndpoint, HeaderEdits, MirrorConfig,
    PathMatch, Redirect, RouteConfig, Scheme, UpgradeConfig,
};
pub use tls::{
    CertificateConfig, ClientAuth, ListenerConfig, TlsListener, UnknownSni, UpstreamTls,
};
pub use upstreams::{
    ActiveCheck, Balance, HashOn, HealthCheckConfig, NodeConfig, PassiveCheck, UpstreamConfig,
    UpstreamProtocol,
};
pub use wasmgate_services::ServiceConfig;

/// A whole gateway: where it listens, its plugins, upstreams and routes.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address of a plain traffic listener (HTTP/1.1 and cleartext HTTP/2).
    /// Without it and without `listeners`, the gateway listens on
    /// 127.0.0.1:8080.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Further listeners, plain or TLS (docs/tls.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerConfig>,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`, the
    /// admin API); none when absent.
    #[serde(default)]
    pub admin: Option<String>,
    /// Address of a listener that answers only `/healthz` and `/readyz`
    /// (for orchestrators' probes where `admin` stays on loopback; see
    /// deploy/kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<String>,
    /// Bearer token the admin API requires (`Authorization: Bearer ...`).
    /// Required when `admin` is not a loopback address; the environment
    /// variable `WASMGATE_ADMIN_TOKEN` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// Further names the admin listener answers to in the `Host` header
    /// (`*.` wildcards allowed). Its own IP, and loopback names when it is
    /// reached over loopback, are always accepted (docs/admin.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_hosts: Vec<String>,
    /// Web origins (`https://ops.example`) allowed to call the admin API
    /// cross-origin; only these get CORS headers. None by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_origins: Vec<String>,
    /// Whether the admin API may change the configuration. Its changes are
    /// kept in `<file>.admin.yaml` beside this file, which is never
    /// rewritten (docs/admin.md). Off by default: this file is the truth.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_writes: bool,
    /// Whether plugins declared in this file may be precompiled modules
    /// (`.cwasm` from `wasmgate compile`). They are native code that runs
    /// without the sandbox's checks, so they are refused by default, and
    /// always when the plugin comes from the admin API, etcd or a URL
    /// (those must be `.wasm`, compiled on the node).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_precompiled: bool,
    /// Whether error answers carry a failed plugin's crash report (its
    /// message, function names, source files and lines). Off by default: a
    /// client then learns the error's kind, the plugin and a request id,
    /// under which the report is in the log and `/plugins/{name}/status`.
    /// A development setting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error_details: bool,
    /// What plugins from the admin API and etcd may be given (hosts,
    /// directories, services, environment variables): nothing beyond these
    /// (none by default). A node setting: only the operator's file says it
    /// (docs/security.md).
    #[serde(default, skip_serializing_if = "grants::Grants::is_empty")]
    pub grants: grants::Grants,
    /// Where routes, upstreams, plugins and services come from: this file
    /// (absent: the default) or an etcd cluster shared by many nodes
    /// (docs/cluster.md). With etcd, this file holds only the node's own
    /// settings (`listen`, `admin`, `limits`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigSource>,
    /// Databases plugins may reach through the host, by name (Redis,
    /// PostgreSQL; docs/services.md). A plugin reaches only those listed in
    /// its own `services`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceConfig>,
    /// Certificates TLS listeners serve, by name (docs/tls.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateConfig>,
    /// Every plugin the routes use, declared once.
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// Filters run on every route, before the route's own at equal priority.
    #[serde(default)]
    pub global_plugins: Vec<FilterRef>,
    /// Matched in listing order; the first match wins.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub limits: Limits,
    /// The access log: one line per request (docs/observability.md). On,
    /// to standard output, as JSON lines, unless said otherwise.
    #[serde(default, skip_serializing_if = "AccessLogConfig::is_default")]
    pub access_log: AccessLogConfig,
    /// Traces (docs/observability.md): off unless a collector is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfig>,
}

impl GatewayConfig {
    /// Reads and checks `path`, with the admin API's changes applied when
    /// `admin_writes` is on (see `admin_changes.rs`).
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigErrors> {
        let mut config = Self::read_file(path)?;
        let admin_file = admin_file_path(path);
        if config.admin_writes {
            let changes = AdminChanges::read(&admin_file)
                .map_err(|(field, message)| ConfigErrors::one(&admin_file, field, message))?;
            changes.apply_to(&mut config);
        } else if admin_file.exists() {
            tracing::warn!(
                file = %admin_file.display(),
                "this admin file is ignored: `admin_writes` is off in the configuration"
            );
        }
        let problems = config.check();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors::in_file(path, problems))
        }
    }

    /// Every traffic listener: `listen` (or the default one, when there is
    /// neither it nor `listeners`), then `listeners`.
    pub fn all_listeners(&self) -> Vec<ListenerConfig> {
        let plain = match &self.listen {
            Some(address) => Some(address.clone()),
            None if self.listeners.is_empty() => Some(node::default_listen()),
            None => None,
        };
        plain
            .map(|address| ListenerConfig {
                address,
                tls: None,
                max_connections: None,
            })
            .into_iter()
            .chain(self.listeners.iter().cloned())
            .collect()
    }

    /// Reads `path` as it is written: no admin changes, no checks. Its
    /// plugins and services are marked as the operator's
    /// (`from_operator_file`, `from_operator`).
    pub fn read_file(path: &Path) -> Result<GatewayConfig, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::one(path, String::new(), format!("cannot read: {e}")))?;
        let mut config = match errors::parse_yaml_reporting::<GatewayConfig>(&text) {
            Ok(config) => config,
            // Everything wrong at once: the unknown fields, and what the
            // checks find in the rest (`wasmgate check`'s one report).
            Err(failure) => {
                let mut problems = failure.errors;
                if let Some(lenient) = failure.lenient {
                    problems.extend(lenient.check());
                }
                return Err(ConfigErrors::in_file(path, problems));
            }
        };
        for plugin in &mut config.plugins {
            plugin.from_operator_file = true;
        }
        for service in &mut config.services {
            service.from_operator = true;
        }
        node::apply_overrides(&mut config);
        Ok(config)
    }

    /// Parses YAML (JSON is YAML too); an error is (field path, message).
    pub fn parse(text: &str) -> Result<GatewayConfig, (String, String)> {
        parse_yaml(text)
    }

    /// The checks serde cannot do: references between sections, unique
    /// names, addresses, patterns, each section's by its own function.
    /// Returns (field, message) pairs.
    pub fn check(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |field: String, message: String| problems.push((field, message));
        node::check(self, &mut problem);
        let services = unique_names(
            self.services.iter().map(|s| s.name.as_str()),
            "services",
            &mut problem,
        );
        check_services(&self.services, &mut problem);
        let plugins = unique_names(
            self.plugins.iter().map(|p| p.name.as_str()),
            "plugins",
            &mut problem,
        );
        let upstreams = unique_names(
            self.upstreams.iter().map(|u| u.name.as_str()),
            "upstreams",
            &mut problem,
        );
        unique_names(
            self.routes.iter().map(|r| r.name.as_str()),
            "routes",
            &mut problem,
        );
        let certificates = unique_names(
            self.certificates.iter().map(|c| c.name.as_str()),
            "certificates",
            &mut problem,
        );
        if let Some(source) = &self.config {
            let local_ports: Vec<u16> = (self.all_listeners().iter())
                .filter_map(|l| l.address.parse::<std::net::SocketAddr>().ok())
                .map(|a| a.port())
                .collect();
            source.check(&local_ports, &mut problem);
        }
        tls::check(
            self.config.is_some(),
            self.listen.as_deref(),
            &self.listeners,
            &self.certificates,
            &certificates,
            &mut problem,
        );
        plugins::check(&self.plugins, &services, &mut problem);
        grants::check(
            "grants.allowed_paths",
            &self.grants.allowed_paths,
            &mut problem,
        );
        for (i, p) in self.plugins.iter().enumerate() {
            if p.from_operator_file || p.kubernetes_namespace.is_some() {
                continue;
            }
            let at = crate::names::entry("plugins", i, &p.name);
            for (field, why) in self.grants.refusals(p, &at) {
                problem(field, why);
            }
        }
        upstreams::check(&self.upstreams, &mut problem);
        plugins::check_filters(
            "global_plugins",
            &self.global_plugins,
            &plugins,
            &mut problem,
        );
        let declared = routes::Declared {
            plugins: &plugins,
            upstreams: &upstreams,
        };
        routes::check(&self.routes, &declared, &mut problem);
        problems
    }
}

/// Each service's own checks (its URL, its CA file), at its index.
fn check_services(services: &[ServiceConfig], problem: &mut dyn FnMut(String, String)) {
    for (i, s) in services.iter().enumerate() {
        let entry = crate::names::entry("services", i, &s.name);
        for (field, message) in s.check() {
            let at = match field {
                "" => entry.clone(),
                field => format!("{entry}.{field}"),
            };
            problem(at, message);
        }
    }
}

/// The JSON Schema of the configuration file.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(GatewayConfig)).expect("schemas serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_in_errors() {
        let (field, message) =
            GatewayConfig::parse("routes:\n  - name: a\n    upstrem: x\n").unwrap_err();
        assert_eq!(field, "routes[0].upstrem");
        assert!(message.starts_with("unknown field `upstrem`"), "{message}");
        assert!(message.contains("at line 3"), "{message}");
        let (field, _) = GatewayConfig::parse(
            "upstreams:\n  - name: u\n    nodes: [{address: a:1, weight: -1}]\n",
        )
        .unwrap_err();
        assert_eq!(field, "upstreams[0].nodes[0].weight");
    }

    #[test]
    fn cross_references_are_checked() {
        let config = GatewayConfig::parse(
            "routes:\n  - name: r\n    upstream: nowhere\n    plugins: [{plugin: ghost}]\n    path: {regex: '('}\n",
        )
        .unwrap();
        let fields: Vec<String> = config.check().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            [
                "routes[r].plugins[0].plugin",
                "routes[r].upstream",
                "routes[r].path.regex"
            ]
        );
    }

    #[test]
    fn names_follow_one_rule() {
        for good in ["api", "auth-v2", "a.b_c", "0day", &"x".repeat(64)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "auth v2",
            "\"><script>alert(1)</script>",
            "__proto__",
            "-x",
            ".",
            "..",
            "a/b",
            "a%20b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let config = GatewayConfig::parse(
            "routes:\n  - {name: 'auth v2', respond: {}}\nupstreams:\n  - {name: constructor, nodes: [{address: 'a:1'}]}\n",
        )
        .unwrap();
        let problems = config.check();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, "routes[0].name");
        assert!(problems[0].1.contains("not a valid name"), "{problems:?}");
    }

    #[test]
    fn committed_schema_is_current() {
        let committed = include_str!("../../../docs/wasmgate.schema.json");
        let current = serde_json::to_string_pretty(&json_schema()).unwrap();
        assert_eq!(
            committed.trim(),
            current.trim(),
            "docs/wasmgate.schema.json is stale: run `wasmgate schema > docs/wasmgate.schema.json`"
        );
    }
}
