//! The gateway's configuration file (`wasmgate.yaml`): its shape, how it is
//! read, and the checks that need more than one field. Every error names
//! the file and the field (`routes[1].upstream`). The JSON Schema printed by
//! `wasmgate schema` is derived from these types.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;

use crate::admin_file::{admin_file_path, AdminChanges};
use serde::{Deserialize, Serialize};
pub use wasmgate_services::ServiceConfig;

/// A whole gateway: where it listens, its plugins, upstreams and routes.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address of the traffic listener (HTTP/1.1 and cleartext HTTP/2).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`, the
    /// admin API); none when absent.
    #[serde(default)]
    pub admin: Option<String>,
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
}

/// Where a node's routes, upstreams, plugins and services are kept when not
/// in its own file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigSource {
    /// etcd endpoints (`http://127.0.0.1:2379`), v3 API.
    pub etcd: Vec<String>,
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

/// Environment variable that sets (and overrides) `admin_token`.
pub const ADMIN_TOKEN_ENV: &str = "WASMGATE_ADMIN_TOKEN";

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

/// A Wasm module and how to run it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// Where the module is: a path (relative to the configuration file) or
    /// an `http://` / `https://` URL (then `sha256` is required), fetched
    /// once and kept in the compile cache's directory.
    pub wasm: PathBuf,
    /// SHA-256 (hex) the module must have; a module with another is refused
    /// (the change is rejected whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `auto` tells the ABI from the module's exports.
    #[serde(default)]
    pub kind: PluginKind,
    /// Higher runs first in a chain; equal priorities keep their listing order.
    #[serde(default)]
    pub priority: i32,
    /// What a request gets when this filter crashes or cannot start.
    #[serde(default)]
    pub fail: FailStrategy,
    /// Proxy-Wasm: what `proxy_on_vm_start` reads (a string as is, anything else as JSON).
    #[serde(default)]
    pub vm_config: Option<serde_json::Value>,
    /// Proxy-Wasm: instances with the same VM id share data and queues (default: the plugin name).
    #[serde(default)]
    pub vm_id: Option<String>,
    /// Proxy-Wasm: `plugin_root_id`.
    #[serde(default)]
    pub root_id: String,
    /// Linear memory cap per instance, in MiB.
    #[serde(default)]
    pub memory_limit_mb: Option<u64>,
    /// Deadline of one callback or function call, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Most instances alive at once (per route for filters).
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// How long a request waits for a free instance before a 503.
    #[serde(default = "default_queue_timeout_ms")]
    pub queue_timeout_ms: u64,
    /// Extism: the manifest's `config` map.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Extism: hosts `extism_http_request` may reach.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Extism: host directory -> guest path.
    #[serde(default)]
    pub allowed_paths: BTreeMap<String, String>,
    /// Services (by name, from `services`) this plugin may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Whether this entry was read from the operator's own configuration
    /// file (not the admin API, its admin file or etcd): only such entries
    /// may name a precompiled module (`allow_precompiled`). Never read from
    /// or written to any configuration.
    #[serde(skip)]
    #[schemars(skip)]
    pub from_operator_file: bool,
}

fn default_pool_size() -> usize {
    64
}

fn default_queue_timeout_ms() -> u64 {
    1000
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PluginKind {
    #[default]
    Auto,
    ProxyWasm,
    Extism,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailStrategy {
    /// The request fails with a 5xx.
    #[default]
    Closed,
    /// The filter is skipped for the rest of the request.
    Open,
}

/// A filter in a chain: a declared plugin and its configuration for this route.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterRef {
    pub plugin: String,
    /// What `proxy_on_configure` reads: a string as is, anything else as JSON.
    #[serde(default)]
    pub conf: Option<serde_json::Value>,
}

/// Renders a `conf` / `vm_config` value as the bytes a plugin reads.
pub fn conf_bytes(value: &Option<serde_json::Value>) -> Vec<u8> {
    match value {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
        Some(other) => other.to_string().into_bytes(),
    }
}

/// An entry of one of the configuration's named lists (plugins, upstreams,
/// routes), as the admin API and the admin file handle them.
pub trait NamedEntry: Serialize + serde::de::DeserializeOwned + Clone {
    /// `route`, `upstream` or `plugin`, for messages.
    const KIND: &'static str;
    fn name(&self) -> &str;
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self>;
    /// The entry as the admin API shows it: secrets (passwords in service
    /// URLs) replaced by `***`.
    fn redacted(&self) -> Self {
        self.clone()
    }
    /// A short hash of the entry's content, for change logs and comparisons.
    fn fingerprint(&self) -> String {
        use sha2::Digest;
        let json = serde_json::to_vec(self).expect("configuration entries serialise");
        hex::encode(&sha2::Sha256::digest(&json)[..8])
    }
}

impl NamedEntry for RouteConfig {
    const KIND: &'static str = "route";
    fn name(&self) -> &str {
        &self.name
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.routes
    }
}

impl NamedEntry for UpstreamConfig {
    const KIND: &'static str = "upstream";
    fn name(&self) -> &str {
        &self.name
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.upstreams
    }
}

impl NamedEntry for ServiceConfig {
    const KIND: &'static str = "service";
    fn name(&self) -> &str {
        &self.name
    }
    fn redacted(&self) -> Self {
        let mut shown = self.clone();
        for url in [&mut shown.redis, &mut shown.postgres]
            .into_iter()
            .flatten()
        {
            *url = wasmgate_services::config::redact(url);
        }
        shown
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.services
    }
}

impl NamedEntry for PluginConfig {
    const KIND: &'static str = "plugin";
    fn name(&self) -> &str {
        &self.name
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.plugins
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    pub nodes: Vec<NodeConfig>,
    #[serde(default)]
    pub balance: Balance,
    /// consistent_hash: what the key is.
    #[serde(default)]
    pub hash_on: HashOn,
    /// hash_on: header: the header's name.
    #[serde(default)]
    pub hash_header: Option<String>,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Time allowed for the upstream's response headers.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// Further nodes tried after a connection failure (and, for requests
    /// without a body, after a failure before any response).
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default)]
    pub health_check: HealthCheckConfig,
}

fn default_connect_timeout_ms() -> u64 {
    3000
}
fn default_read_timeout_ms() -> u64 {
    30_000
}
fn default_retries() -> u32 {
    1
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// `host:port`.
    pub address: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Smooth weighted round robin.
    #[default]
    RoundRobin,
    /// A hash ring: one key always lands on the same healthy node.
    ConsistentHash,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HashOn {
    #[default]
    ClientIp,
    Path,
    Header,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Probes sent to every node on a timer.
    #[serde(default)]
    pub active: Option<ActiveCheck>,
    /// Failures of real requests take a node out for a while.
    #[serde(default)]
    pub passive: Option<PassiveCheck>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActiveCheck {
    #[serde(default = "default_check_path")]
    pub path: String,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    #[serde(default = "default_check_timeout_ms")]
    pub timeout_ms: u64,
    /// Consecutive successes that bring a node back.
    #[serde(default = "default_healthy")]
    pub healthy_threshold: u32,
    /// Consecutive failures that take a node out.
    #[serde(default = "default_unhealthy")]
    pub unhealthy_threshold: u32,
}

fn default_check_path() -> String {
    "/".into()
}
fn default_interval_ms() -> u64 {
    2000
}
fn default_check_timeout_ms() -> u64 {
    1000
}
fn default_healthy() -> u32 {
    2
}
fn default_unhealthy() -> u32 {
    3
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PassiveCheck {
    /// Consecutive failed requests (connect errors, timeouts, 502-504) that eject a node.
    #[serde(default = "default_unhealthy")]
    pub max_failures: u32,
    /// How long an ejected node stays out.
    #[serde(default = "default_ejection_ms")]
    pub ejection_ms: u64,
}

fn default_ejection_ms() -> u64 {
    10_000
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// `api.example.com` or `*.example.com`; empty matches any host.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Empty matches any path.
    #[serde(default)]
    pub path: PathMatch,
    /// Empty matches any method.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Header name -> exact value every request must carry.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The route's filter chain.
    #[serde(default)]
    pub plugins: Vec<FilterRef>,
    /// Endpoint: an upstream's name ...
    #[serde(default)]
    pub upstream: Option<String>,
    /// ... or an Extism function ...
    #[serde(default)]
    pub function: Option<FunctionEndpoint>,
    /// ... or a fixed answer.
    #[serde(default)]
    pub respond: Option<FixedResponse>,
    /// Requests this route serves at once; more are answered 503 with
    /// `Retry-After` at once instead of queueing. Unlimited when absent.
    #[serde(default)]
    pub max_concurrent_requests: Option<usize>,
}

/// At most one of `exact`, `prefix`, `regex`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathMatch {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    /// Matched against the whole path (without the query).
    #[serde(default)]
    pub regex: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionEndpoint {
    /// An Extism plugin declared in `plugins`.
    pub plugin: String,
    /// The function called (default: the last path segment names it).
    #[serde(default)]
    pub function: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixedResponse {
    #[serde(default = "default_status")]
    pub status: u16,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn default_status() -> u16 {
    200
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

/// One thing wrong with a configuration, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// `routes[1].upstream`; empty for the file as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field.as_str() {
            "" => write!(f, "{}: {}", self.file.display(), self.message),
            field => write!(f, "{}: {field}: {}", self.file.display(), self.message),
        }
    }
}

/// Every error found, one per line.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    fn one(file: &Path, field: String, message: String) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: file.to_path_buf(),
            field,
            message,
        }])
    }
}

/// Parses YAML into `T`; an error is (field path, message).
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, (String, String)> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        let message = e.into_inner().to_string();
        // The YAML error repeats the (shorter) path: keep the message only.
        let message = match message.split_once(": ") {
            Some((path, rest)) if !path.contains(' ') => rest.to_string(),
            _ => message,
        };
        (field, message)
    })
}

impl GatewayConfig {
    /// Reads and checks `path`, with the admin API's changes applied when
    /// `admin_writes` is on (see `admin_file.rs`).
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
            Err(ConfigErrors(
                problems
                    .into_iter()
                    .map(|(field, message)| ConfigError {
                        file: path.to_path_buf(),
                        field,
                        message,
                    })
                    .collect(),
            ))
        }
    }

    /// Reads `path` as it is written: no admin changes, no checks. Its
    /// plugins are marked as the operator's (`from_operator_file`).
    pub fn read_file(path: &Path) -> Result<GatewayConfig, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::one(path, String::new(), format!("cannot read: {e}")))?;
        let mut config = Self::parse(&text)
            .map_err(|(field, message)| ConfigErrors::one(path, field, message))?;
        for plugin in &mut config.plugins {
            plugin.from_operator_file = true;
        }
        Ok(config)
    }

    /// Parses YAML (JSON is YAML too); an error is (field path, message).
    pub fn parse(text: &str) -> Result<GatewayConfig, (String, String)> {
        parse_yaml(text)
    }

    /// The checks serde cannot do: references between sections, unique
    /// names, addresses, patterns. Returns (field, message) pairs.
    pub fn check(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut problem = |field: String, message: String| problems.push((field, message));
        for (field, address) in [
            ("listen", Some(&self.listen)),
            ("admin", self.admin.as_ref()),
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
        for (i, origin) in self.admin_origins.iter().enumerate() {
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
        if self
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
        if self.limits.long_call_threads == Some(0) {
            problem(
                "limits.long_call_threads".into(),
                "must be at least 1 (long guest calls need a thread to run on)".into(),
            );
        }
        if let Some(Ok(address)) = self
            .admin
            .as_ref()
            .map(|a| a.parse::<std::net::SocketAddr>())
        {
            let token = self.admin_token.is_some()
                || std::env::var_os(ADMIN_TOKEN_ENV).is_some_and(|t| !t.is_empty());
            if !address.ip().is_loopback() && !token {
                problem(
                    "admin".into(),
                    format!("the admin API on a non-loopback address ({address}) needs a token: set `admin_token` or {ADMIN_TOKEN_ENV}"),
                );
            }
        }
        let services = unique_names(
            self.services.iter().map(|s| s.name.as_str()),
            "services",
            &mut problem,
        );
        for (i, s) in self.services.iter().enumerate() {
            for (field, message) in s.check() {
                let at = match field {
                    "" => format!("services[{i}]"),
                    field => format!("services[{i}].{field}"),
                };
                problem(at, message);
            }
        }
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
        for (i, p) in self.plugins.iter().enumerate() {
            if p.pool_size == 0 {
                problem(
                    format!("plugins[{i}].pool_size"),
                    "must be at least 1".into(),
                );
            }
            for (j, name) in p.services.iter().enumerate() {
                if !services.contains(name.as_str()) {
                    problem(
                        format!("plugins[{i}].services[{j}]"),
                        format!("no service named `{name}` in `services`"),
                    );
                }
            }
        }
        for (i, u) in self.upstreams.iter().enumerate() {
            let at = format!("upstreams[{i}]");
            if u.nodes.is_empty() {
                problem(
                    format!("{at}.nodes"),
                    "an upstream needs at least one node".into(),
                );
            }
            for (j, n) in u.nodes.iter().enumerate() {
                if !looks_like_host_port(&n.address) {
                    problem(
                        format!("{at}.nodes[{j}].address"),
                        format!("`{}` is not host:port", n.address),
                    );
                }
                if n.weight == 0 {
                    problem(
                        format!("{at}.nodes[{j}].weight"),
                        "must be at least 1".into(),
                    );
                }
            }
            if u.hash_on == HashOn::Header && u.hash_header.is_none() {
                problem(
                    format!("{at}.hash_header"),
                    "hash_on: header needs hash_header (the header's name)".into(),
                );
            }
        }
        let filters =
            |field: String, list: &[FilterRef], problem: &mut dyn FnMut(String, String)| {
                for (j, f) in list.iter().enumerate() {
                    if !plugins.contains(f.plugin.as_str()) {
                        problem(
                            format!("{field}[{j}].plugin"),
                            format!("no plugin named `{}` in `plugins`", f.plugin),
                        );
                    }
                }
            };
        filters("global_plugins".into(), &self.global_plugins, &mut problem);
        for (i, r) in self.routes.iter().enumerate() {
            let at = format!("routes[{i}]");
            filters(format!("{at}.plugins"), &r.plugins, &mut problem);
            let endpoints = [
                r.upstream.is_some(),
                r.function.is_some(),
                r.respond.is_some(),
            ];
            if endpoints.iter().filter(|&&e| e).count() != 1 {
                problem(
                    at.clone(),
                    "a route needs exactly one endpoint: upstream, function or respond".into(),
                );
            }
            if let Some(name) = &r.upstream {
                if !upstreams.contains(name.as_str()) {
                    problem(
                        format!("{at}.upstream"),
                        format!("no upstream named `{name}` in `upstreams`"),
                    );
                }
            }
            if let Some(function) = &r.function {
                if !plugins.contains(function.plugin.as_str()) {
                    problem(
                        format!("{at}.function.plugin"),
                        format!("no plugin named `{}` in `plugins`", function.plugin),
                    );
                }
            }
            if let Some(respond) = &r.respond {
                if !(100..=999).contains(&respond.status) {
                    problem(format!("{at}.respond.status"), "must be 100-999".into());
                }
            }
            let path = &r.path;
            let set = [&path.exact, &path.prefix, &path.regex]
                .iter()
                .filter(|p| p.is_some())
                .count();
            if set > 1 {
                problem(
                    format!("{at}.path"),
                    "give one of exact, prefix or regex".into(),
                );
            }
            if let Some(pattern) = &path.regex {
                if let Err(e) = regex::Regex::new(pattern) {
                    problem(format!("{at}.path.regex"), format!("invalid regex: {e}"));
                }
            }
            for (j, host) in r.hosts.iter().enumerate() {
                if host.contains('*') && !(host.starts_with("*.") && host[2..].find('*').is_none())
                {
                    problem(
                        format!("{at}.hosts[{j}]"),
                        format!("`{host}`: only a leading `*.` wildcard is supported"),
                    );
                }
            }
            for (j, method) in r.methods.iter().enumerate() {
                if hyper::Method::from_bytes(method.as_bytes()).is_err() {
                    problem(
                        format!("{at}.methods[{j}]"),
                        format!("`{method}` is not an HTTP method"),
                    );
                }
            }
        }
        problems
    }
}

/// The one rule for the names of routes, upstreams, plugins and services,
/// wherever they come from (a file, the admin API, etcd): 1 to 64 ASCII
/// letters, digits, `.`, `_` and `-`, beginning with a letter or digit (as
/// APISIX restricts its ids). Names travel in URL paths, etcd keys, metric
/// labels and the dashboard's pages, where spaces, slashes, quotes or markup
/// would each need their own escaping and a name like `__proto__` means
/// something else.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a valid name: use 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit",
            name.escape_debug()
        ))
    }
}

fn unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    section: &str,
    problem: &mut dyn FnMut(String, String),
) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    for (i, name) in names.enumerate() {
        if let Err(message) = check_name(name) {
            problem(format!("{section}[{i}].name"), message);
        } else if !seen.insert(name) {
            problem(
                format!("{section}[{i}].name"),
                format!("`{name}` is declared twice"),
            );
        }
    }
    seen
}

fn looks_like_host_port(address: &str) -> bool {
    match address.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
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
                "routes[0].plugins[0].plugin",
                "routes[0].upstream",
                "routes[0].path.regex"
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
