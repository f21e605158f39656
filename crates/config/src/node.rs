//! The node's own settings: where it listens, its admin listener and
//! token, the configuration source (a file or etcd), and its limits. In
//! cluster mode these stay in each node's file; everything else is shared.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::GatewayConfig;

/// Where a node's routes, upstreams, plugins and services are kept when not
/// in its own file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigSource {
    /// etcd endpoints (`http://127.0.0.1:2379`), v3 API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd: Vec<String>,
    /// Or a Kubernetes API server: the node serves the Gateway API
    /// resources of its GatewayClass (docs/kubernetes.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSource>,
    /// The key prefix every object lives under.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Where the node keeps the last configuration it applied, to start
    /// from it while etcd is unreachable (none: it waits for etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_file: Option<PathBuf>,
    /// This node's name in the cluster view (default: the listen address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

fn default_prefix() -> String {
    "/wasmgate".into()
}

/// How a node reaches its Kubernetes API server and which resources it
/// serves.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSource {
    /// A kubeconfig file (relative to this file); absent: `$KUBECONFIG`,
    /// `~/.kube/config`, else the pod's service account (in-cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The GatewayClasses whose `spec.controllerName` is this are the
    /// node's; their Gateways and the routes attached to them are served.
    #[serde(default = "default_controller_name")]
    pub controller_name: String,
    /// Where the replicas' Lease lives: the one holding it writes the
    /// statuses. Default: `$POD_NAMESPACE`, else the pod's own namespace,
    /// else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_namespace: Option<String>,
    /// Gateway listener port -> the local port of this node's listener that
    /// serves it (`{80: 8080, 443: 8443}`): a route attached to a Gateway
    /// listener is served only on the node listener its port maps to, and
    /// a Gateway listener whose port is not here is refused in its status
    /// (`PortUnavailable`). Empty: every Gateway listener is served on
    /// every node listener of its scheme, whatever its port.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<u16, u16>,
    /// How WasmPlugins' `oci://` modules are pulled: a private CA, plain
    /// HTTP for a registry inside the cluster, limits. Credentials come
    /// from each WasmPlugin's `imagePullSecret`, else from these, else from
    /// the node's Docker config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<crate::RegistryConfig>,
    /// `namespace/name` of a ConfigMap whose `services.yaml` lists more
    /// services (Redis, PostgreSQL) as `services` does, each password from
    /// a Secret of that namespace (`password_secret: {name, key}`);
    /// followed like every other resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<String>,
}

fn default_controller_name() -> String {
    "wasmgate.io/gateway-controller".into()
}

impl ConfigSource {
    /// `config` names exactly one source; a Kubernetes source's `ports` map
    /// to ports this node listens on (`local_ports`).
    pub(crate) fn check(&self, local_ports: &[u16], problem: &mut dyn FnMut(String, String)) {
        if let Some(k) = &self.kubernetes {
            if (k.services.as_deref()).is_some_and(|s| {
                !s.split_once('/')
                    .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty())
            }) {
                problem(
                    "config.kubernetes.services".into(),
                    "`namespace/name` of a ConfigMap".into(),
                );
            }
            for (gateway_port, local) in &k.ports {
                if !local_ports.contains(local) {
                    problem(
                        format!("config.kubernetes.ports.{gateway_port}"),
                        format!(
                            "this node has no listener on port {local} (`listen`, `listeners`)"
                        ),
                    );
                }
            }
        }
        match (self.etcd.is_empty(), &self.kubernetes) {
            (true, None) => problem(
                "config".into(),
                "name a source: `etcd: [endpoints]` or `kubernetes: {...}`".into(),
            ),
            (false, Some(_)) => problem(
                "config".into(),
                "`etcd` and `kubernetes` are two sources; name one".into(),
            ),
            _ => {}
        }
    }
}

/// Command-line overrides of the node's own addresses (`wasmgate run
/// --listen/--admin`). Set once at start-up and applied to every reading of
/// the file, reloads included, so a reload does not see the file's own
/// address as a change.
#[derive(Clone, Debug, Default)]
pub struct NodeOverrides {
    pub listen: Option<String>,
    pub admin: Option<String>,
}

static OVERRIDES: std::sync::OnceLock<NodeOverrides> = std::sync::OnceLock::new();

/// Sets the overrides for this process (the first call wins).
pub fn set_overrides(overrides: NodeOverrides) {
    let _ = OVERRIDES.set(overrides);
}

/// The overrides in force (none unless `set_overrides` was called).
pub fn overrides() -> NodeOverrides {
    OVERRIDES.get().cloned().unwrap_or_default()
}

pub(crate) fn apply_overrides(config: &mut GatewayConfig) {
    let Some(overrides) = OVERRIDES.get() else {
        return;
    };
    if let Some(listen) = &overrides.listen {
        config.listen = Some(listen.clone());
    }
    if let Some(admin) = &overrides.admin {
        config.admin = Some(admin.clone());
    }
}

/// Where and how the node writes its access log; read at start-up.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Whether requests are logged at all (routes can opt out one by one).
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// A file, appended to and opened again on SIGUSR1 (logrotate's
    /// convention), relative to this file's directory; `-` is standard
    /// output.
    #[serde(default = "stdout")]
    pub path: String,
    #[serde(default)]
    pub format: AccessLogFormat,
}

/// JSON lines, or text with named fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    #[default]
    Json,
    Text,
}

fn enabled() -> bool {
    true
}

fn stdout() -> String {
    "-".into()
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: true,
            path: stdout(),
            format: AccessLogFormat::Json,
        }
    }
}

impl AccessLogConfig {
    pub fn is_default(&self) -> bool {
        *self == AccessLogConfig::default()
    }
}

/// Traces of requests, exported over OTLP; read at start-up.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// A collector's OTLP endpoint (Jaeger, Tempo, the OpenTelemetry
    /// Collector, ...): `http://host:4317`, or `https://` for TLS.
    pub endpoint: String,
    /// OTLP over `grpc` (port 4317, the default) or `http` (protobuf
    /// POSTed to `<endpoint>/v1/traces`, port 4318).
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// For an `https://` endpoint: a PEM file of the CAs to trust (a
    /// private CA, a self-signed collector; relative to the configuration
    /// file); without it, Mozilla's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The share of new traces recorded, 0 to 1. A request that carries a
    /// `traceparent` follows its sampled flag instead.
    #[serde(default = "full_ratio")]
    pub sample_ratio: f64,
    /// The spans' `service.name`.
    #[serde(default = "service_name")]
    pub service_name: String,
    /// How long finished spans wait to go in one batch.
    #[serde(default = "batch_delay_ms")]
    pub batch_delay_ms: u64,
    /// Finished spans kept while the collector is slow or down; beyond
    /// them, spans are dropped (requests never wait).
    #[serde(default = "queue_spans")]
    pub queue_spans: usize,
}

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    #[default]
    Grpc,
    Http,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: String::new(),
            protocol: OtlpProtocol::Grpc,
            ca_file: None,
            sample_ratio: full_ratio(),
            service_name: service_name(),
            batch_delay_ms: batch_delay_ms(),
            queue_spans: queue_spans(),
        }
    }
}

fn full_ratio() -> f64 {
    1.0
}

fn batch_delay_ms() -> u64 {
    1000
}

fn queue_spans() -> usize {
    8192
}

fn service_name() -> String {
    "wasmgate".into()
}

/// Environment variable that sets (and overrides) `admin_token`.
pub const ADMIN_TOKEN_ENV: &str = "WASMGATE_ADMIN_TOKEN";

pub(crate) fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest request body a filter may buffer or a function may receive (413 beyond).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Time a client has to send its request headers (and, on a new
    /// connection, its first byte); the connection is closed after it.
    #[serde(default = "default_header_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// Longest pause in a request body before the request fails with 408.
    #[serde(default = "default_body_timeout_ms")]
    pub body_read_timeout_ms: u64,
    /// Worker threads (default: one per CPU).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Threads for guest calls that run longer than 1 ms, at a lower CPU
    /// priority (default: one per CPU but one, so a core stays free for
    /// request handling).
    #[serde(default)]
    pub long_call_threads: Option<usize>,
    /// Nice value (0-19) of those threads: how much of a busy CPU long calls
    /// get against request handling (default 2: about two fifths against one
    /// busy worker; docs/architecture.md, "The slow lane").
    #[serde(default)]
    pub long_call_nice: Option<i32>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_max_body(),
            header_read_timeout_ms: default_header_timeout_ms(),
            body_read_timeout_ms: default_body_timeout_ms(),
            threads: None,
            long_call_threads: None,
            long_call_nice: None,
        }
    }
}

fn default_max_body() -> usize {
    16 * 1024 * 1024
}

fn default_header_timeout_ms() -> u64 {
    30_000
}

fn default_body_timeout_ms() -> u64 {
    30_000
}

/// What a collector endpoint and a sampling ratio must be.
pub fn check_tracing(tracing: &TracingConfig, problem: &mut dyn FnMut(String, String)) {
    let endpoint = &tracing.endpoint;
    let authority = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"));
    if authority.is_none_or(|a| a.trim_end_matches('/').is_empty()) {
        problem(
            "tracing.endpoint".into(),
            format!(
                "`{endpoint}` is not an OTLP endpoint wasmgate can reach: write http://host:port (as `http://127.0.0.1:4317`), or https:// for TLS"
            ),
        );
    }
    if tracing.ca_file.is_some() && !endpoint.starts_with("https://") {
        problem(
            "tracing.ca_file".into(),
            format!("`{endpoint}` is not TLS: a CA file only applies to an https:// endpoint"),
        );
    }
    if !(0.0..=1.0).contains(&tracing.sample_ratio) {
        problem(
            "tracing.sample_ratio".into(),
            format!(
                "{} is not a share: write 0 to 1 (0.01 records one new trace in a hundred)",
                tracing.sample_ratio
            ),
        );
    }
}

/// Addresses, admin origins and token, limits.
pub(crate) fn check(config: &GatewayConfig, problem: &mut dyn FnMut(String, String)) {
    for (field, address) in [
        ("listen", config.listen.as_ref()),
        ("admin", config.admin.as_ref()),
    ] {
        if let Some(address) = address {
            if address.parse::<std::net::SocketAddr>().is_err() {
                problem(
                    field.into(),
                    format!("`{address}` is not an IP:port address"),
                );
            }
        }
    }
    for (i, origin) in config.admin_origins.iter().enumerate() {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let authority = authority.map(|a| a.trim_end_matches('/'));
        if authority.is_none_or(|a| a.is_empty() || a.contains('/')) {
            problem(
                format!("admin_origins[{i}]"),
                format!("`{origin}` is not an origin: write scheme://host[:port], as `https://ops.example`"),
            );
        }
    }
    if config
        .limits
        .long_call_nice
        .is_some_and(|n| !(0..=19).contains(&n))
    {
        problem(
            "limits.long_call_nice".into(),
            "must be 0-19 (a nice value; higher leaves more of a busy CPU to request handling)"
                .into(),
        );
    }
    if config.limits.long_call_threads == Some(0) {
        problem(
            "limits.long_call_threads".into(),
            "must be at least 1 (long guest calls need a thread to run on)".into(),
        );
    }
    if let Some(tracing) = &config.tracing {
        check_tracing(tracing, problem);
    }
    if let Some(Ok(address)) = config
        .admin
        .as_ref()
        .map(|a| a.parse::<std::net::SocketAddr>())
    {
        let token = config.admin_token.is_some()
            || std::env::var_os(ADMIN_TOKEN_ENV).is_some_and(|t| !t.is_empty());
        if !address.ip().is_loopback() && !token {
            problem(
                "admin".into(),
                format!("the admin API on a non-loopback address ({address}) needs a token: set `admin_token` or {ADMIN_TOKEN_ENV}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracing_endpoint_is_http_or_https_and_a_ratio_a_share() {
        let mut problems = Vec::new();
        let bad = TracingConfig {
            endpoint: "collector:4317".into(),
            sample_ratio: 1.5,
            ..TracingConfig::default()
        };
        check_tracing(&bad, &mut |at, why| problems.push((at, why)));
        let fields: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(fields, ["tracing.endpoint", "tracing.sample_ratio"]);
        problems.clear();
        // A CA file is for TLS only.
        let plain_with_ca = TracingConfig {
            endpoint: "http://127.0.0.1:4318".into(),
            ca_file: Some("ca.pem".into()),
            ..TracingConfig::default()
        };
        check_tracing(&plain_with_ca, &mut |at, why| problems.push((at, why)));
        let fields: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(fields, ["tracing.ca_file"]);
        problems.clear();
        for good in [
            TracingConfig {
                endpoint: "http://127.0.0.1:4317".into(),
                ..TracingConfig::default()
            },
            TracingConfig {
                endpoint: "https://collector:4318".into(),
                protocol: OtlpProtocol::Http,
                ca_file: Some("ca.pem".into()),
                ..TracingConfig::default()
            },
        ] {
            check_tracing(&good, &mut |at, why| problems.push((at, why)));
        }
        assert!(problems.is_empty(), "{problems:?}");
    }
}
