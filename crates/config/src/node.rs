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
    /// TLS to etcd: its CA and this node's client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_tls: Option<crate::etcd_access::EtcdTls>,
    /// etcd's user and password, when etcd has `auth enable`d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_auth: Option<crate::etcd_access::EtcdAuth>,
    /// Keys sealing every configuration object in etcd (docs/cluster.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::etcd_access::Encryption>,
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
    /// What each namespace's WasmPlugins may use beyond the services of a
    /// services ConfigMap in that namespace: services by name and
    /// directories of modules on the node (`file://`). Nothing by default
    /// (docs/security.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grants: crate::grants::NamespaceGrants,
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
            if k.registry
                .as_ref()
                .is_some_and(|r| r.has_credentials() && r.hosts.is_empty())
            {
                problem(
                    "config.kubernetes.registry.hosts".into(),
                    "credentials here apply to every WasmPlugin: name the registries they are for (`hosts: [registry.example.com]`), or any WasmPlugin could send them to a registry of its own".into(),
                );
            }
            for (namespace, grant) in &k.grants {
                crate::grants::check(
                    &format!("config.kubernetes.grants.{namespace}.files"),
                    &grant.files,
                    problem,
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
        crate::etcd_access::check(
            &self.etcd,
            self.etcd_tls.as_ref(),
            self.etcd_auth.as_ref(),
            self.encryption.as_ref(),
            problem,
        );
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
    /// `traceparent` follows its sampled flag instead, unless
    /// `respect_sampled` is off.
    #[serde(default = "full_ratio")]
    pub sample_ratio: f64,
    /// Whether a client's `traceparent` sampled flag decides that its
    /// request is recorded (W3C's rule, the default). Off (`false`), every
    /// request is recorded at `sample_ratio`, whatever its client says, so
    /// clients cannot decide what reaches the collector.
    #[serde(default = "enabled")]
    pub respect_sampled: bool,
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
            respect_sampled: true,
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
    /// Connections each listener holds at once (a listener's own
    /// `max_connections` overrides it); one more is closed as soon as it is
    /// accepted, and counted (`wasmgate_listener_connections_refused_total`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// An HTTP/2 connection with no open stream for this long gets a GOAWAY
    /// and is closed (HTTP/1.1's keep-alive connections are closed after
    /// `header_read_timeout_ms` without a request).
    #[serde(default = "default_http2_idle_timeout_ms")]
    pub http2_idle_timeout_ms: u64,
    /// A PING to an HTTP/2 client after this long without a frame from it
    /// (0: never); without its ACK within `http2_keepalive_timeout_ms` the
    /// connection is closed.
    #[serde(default = "default_http2_keepalive_interval_ms")]
    pub http2_keepalive_interval_ms: u64,
    #[serde(default = "default_http2_keepalive_timeout_ms")]
    pub http2_keepalive_timeout_ms: u64,
    /// Streams an HTTP/2 client may have open at once on one connection.
    #[serde(default = "default_http2_max_concurrent_streams")]
    pub http2_max_concurrent_streams: u32,
    /// Largest HTTP/2 request header list (decoded), which also bounds
    /// CONTINUATION frames; a larger one is refused.
    #[serde(default = "default_http2_max_header_list_bytes")]
    pub http2_max_header_list_bytes: u32,
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
    /// What the host holds for a Proxy-Wasm filter outside its memory:
    /// call replies, calls in flight, gRPC stream queues, shared data and
    /// queues (docs/proxy-wasm.md, "Host limits"). Reloaded with the plugins.
    #[serde(default)]
    pub proxy_wasm: ProxyWasmLimits,
    /// How long a running node's build waits for a `wasi:http` component
    /// to compile before it serves without it: the component's routes
    /// answer 503 (`plugin_starting`) until its compile ends, and the node
    /// then reloads (docs/gateway.md, "Components that compile in the
    /// background"). `wasmgate check` always waits.
    #[serde(default = "default_component_compile_wait_ms")]
    pub component_compile_wait_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_max_body(),
            header_read_timeout_ms: default_header_timeout_ms(),
            body_read_timeout_ms: default_body_timeout_ms(),
            max_connections: default_max_connections(),
            http2_idle_timeout_ms: default_http2_idle_timeout_ms(),
            http2_keepalive_interval_ms: default_http2_keepalive_interval_ms(),
            http2_keepalive_timeout_ms: default_http2_keepalive_timeout_ms(),
            http2_max_concurrent_streams: default_http2_max_concurrent_streams(),
            http2_max_header_list_bytes: default_http2_max_header_list_bytes(),
            threads: None,
            long_call_threads: None,
            long_call_nice: None,
            proxy_wasm: ProxyWasmLimits::default(),
            component_compile_wait_ms: default_component_compile_wait_ms(),
        }
    }
}

fn default_component_compile_wait_ms() -> u64 {
    2_000
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

fn default_max_connections() -> usize {
    10_000
}

fn default_http2_idle_timeout_ms() -> u64 {
    60_000
}

fn default_http2_keepalive_interval_ms() -> u64 {
    30_000
}

fn default_http2_keepalive_timeout_ms() -> u64 {
    10_000
}

fn default_http2_max_concurrent_streams() -> u32 {
    128
}

fn default_http2_max_header_list_bytes() -> u32 {
    64 * 1024
}

/// Caps on what a Proxy-Wasm filter can make the host hold for it. A call
/// over one is refused with a status the SDKs handle, counted in
/// `wasmgate_plugin_host_limit_refusals_total{limit}` and logged.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyWasmLimits {
    /// Largest body of a `proxy_http_call` or `proxy_grpc_call` reply (4
    /// MiB); a longer one is not read further, and the call fails
    /// (status 8, RESOURCE_EXHAUSTED).
    #[serde(default = "default_call_reply_bytes")]
    pub call_reply_bytes: usize,
    /// Calls and gRPC streams one context (a request's, or a root's) has in
    /// flight at once (64); one more is refused (InternalFailure).
    #[serde(default = "default_calls_in_flight")]
    pub calls_in_flight: usize,
    /// Bytes one gRPC stream holds that the connection has not sent yet (4
    /// MiB); a `proxy_grpc_send` beyond it is refused (BadArgument).
    #[serde(default = "default_grpc_send_queue_bytes")]
    pub grpc_send_queue_bytes: usize,
    /// The same, in messages (1024).
    #[serde(default = "default_grpc_send_queue_messages")]
    pub grpc_send_queue_messages: usize,
    /// Bytes of gRPC stream messages received for one context that its
    /// filter has not heard yet (8 MiB); beyond it the servers wait (HTTP/2
    /// flow control). One message always fits.
    #[serde(default = "default_grpc_receive_bytes")]
    pub grpc_receive_bytes: usize,
    /// Largest shared-data entry, key and value together (1 MiB): a larger
    /// `proxy_set_shared_data` is refused (BadArgument).
    #[serde(default = "default_shared_data_value_bytes")]
    pub shared_data_value_bytes: usize,
    /// Keys and values of one VM id's shared data (32 MiB): a set that
    /// grows it beyond is refused (InternalFailure).
    #[serde(default = "default_shared_data_bytes")]
    pub shared_data_bytes: usize,
    /// Keys of one VM id's shared data (65536): a new one beyond is refused
    /// (InternalFailure).
    #[serde(default = "default_shared_data_keys")]
    pub shared_data_keys: usize,
    /// Shared queues one VM id registers (16): one more is refused
    /// (InternalFailure).
    #[serde(default = "default_shared_queues")]
    pub shared_queues: usize,
    /// Items waiting in one shared queue (10000): an enqueue beyond is
    /// refused (NotFound, the one failure the SDKs expect there).
    #[serde(default = "default_shared_queue_items")]
    pub shared_queue_items: usize,
    /// Bytes waiting in one shared queue (4 MiB): an enqueue beyond is
    /// refused (NotFound).
    #[serde(default = "default_shared_queue_bytes")]
    pub shared_queue_bytes: usize,
}

impl Default for ProxyWasmLimits {
    fn default() -> Self {
        ProxyWasmLimits {
            call_reply_bytes: default_call_reply_bytes(),
            calls_in_flight: default_calls_in_flight(),
            grpc_send_queue_bytes: default_grpc_send_queue_bytes(),
            grpc_send_queue_messages: default_grpc_send_queue_messages(),
            grpc_receive_bytes: default_grpc_receive_bytes(),
            shared_data_value_bytes: default_shared_data_value_bytes(),
            shared_data_bytes: default_shared_data_bytes(),
            shared_data_keys: default_shared_data_keys(),
            shared_queues: default_shared_queues(),
            shared_queue_items: default_shared_queue_items(),
            shared_queue_bytes: default_shared_queue_bytes(),
        }
    }
}

fn default_call_reply_bytes() -> usize {
    4 << 20
}

fn default_calls_in_flight() -> usize {
    64
}

fn default_grpc_send_queue_bytes() -> usize {
    4 << 20
}

fn default_grpc_send_queue_messages() -> usize {
    1024
}

fn default_grpc_receive_bytes() -> usize {
    8 << 20
}

fn default_shared_data_value_bytes() -> usize {
    1 << 20
}

fn default_shared_data_bytes() -> usize {
    32 << 20
}

fn default_shared_data_keys() -> usize {
    65_536
}

fn default_shared_queues() -> usize {
    16
}

fn default_shared_queue_items() -> usize {
    10_000
}

fn default_shared_queue_bytes() -> usize {
    4 << 20
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
        ("probes", config.probes.as_ref()),
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
    let limits = &config.limits;
    for (field, value, what) in [
        (
            "max_connections",
            limits.max_connections as u64,
            "a listener could take no connection",
        ),
        (
            "http2_idle_timeout_ms",
            limits.http2_idle_timeout_ms,
            "HTTP/2 connections would be closed at once",
        ),
        (
            "http2_keepalive_timeout_ms",
            limits.http2_keepalive_timeout_ms,
            "no PING could be answered in time",
        ),
        (
            "http2_max_concurrent_streams",
            u64::from(limits.http2_max_concurrent_streams),
            "an HTTP/2 client could send no request",
        ),
        (
            "http2_max_header_list_bytes",
            u64::from(limits.http2_max_header_list_bytes),
            "no HTTP/2 request would fit",
        ),
    ] {
        if value == 0 {
            problem(
                format!("limits.{field}"),
                format!("must be more than 0 ({what})"),
            );
        }
    }
    for (i, listener) in config.listeners.iter().enumerate() {
        if listener.max_connections == Some(0) {
            problem(
                format!("listeners[{i}].max_connections"),
                "must be more than 0 (the listener could take no connection; leave it out for limits.max_connections)".into(),
            );
        }
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
