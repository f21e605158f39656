//! `plugins`: every module the routes use, declared once, and how a route
//! refers to one as a filter (`FilterRef`).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Wasm module and how to run it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// Where the module is: a path (relative to the configuration file),
    /// an `http://` / `https://` URL (then `sha256` is required), fetched
    /// once and kept in the compile cache's directory, or an image in an
    /// OCI registry, `oci://registry[:port]/repository[:tag][@sha256:...]`
    /// (docs/plugins.md).
    pub wasm: PathBuf,
    /// SHA-256 (hex) the module must have; a module with another is refused
    /// (the change is rejected whole). For an `oci://` module, the image's
    /// digest (as Higress and Istio check it) or the module's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `oci://` modules: when the registry is asked what a tag points to
    /// (default `if_not_present`; `always` for `latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullPolicy>,
    /// `oci://` modules: how to reach the registry and who to say we are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryConfig>,
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
    /// Proxy-Wasm: linear memory cap while an instance starts (start code,
    /// `proxy_on_vm_start`, `proxy_on_configure`), in MiB (default:
    /// `memory_limit_mb`). A Wasm memory never shrinks, so once started an
    /// instance's callbacks are held to `memory_limit_mb` or to what its
    /// start left, whichever is more.
    #[serde(default)]
    pub startup_memory_limit_mb: Option<u64>,
    /// Deadline of one callback or function call, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Proxy-Wasm: deadline of an instance's start-up (start code,
    /// `proxy_on_vm_start`, `proxy_on_configure`), in milliseconds
    /// (default 60000).
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    /// Most instances alive at once (per route for filters); also spelled
    /// `max_instances`. A filter's instance stays with its request until
    /// the request is over, so this bounds the requests a route filters at
    /// once (and the memory: docs/gateway.md, "Sizing pools").
    #[serde(default = "default_pool_size", alias = "max_instances")]
    pub pool_size: usize,
    /// An idle instance unused this long is dropped, down to the one used
    /// last, which stays warm (default 30000).
    #[serde(default = "default_pool_idle_timeout_ms")]
    pub pool_idle_timeout_ms: u64,
    /// How long a request waits for a free instance before a 503.
    #[serde(default = "default_queue_timeout_ms")]
    pub queue_timeout_ms: u64,
    /// Extism: the manifest's `config` map.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Extism and components: hosts `extism_http_request` or
    /// `wasi:http/outgoing-handler` may reach (globs; none by default).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Extism and components: host directory -> guest path (`ro:` before
    /// the host directory: read-only).
    #[serde(default)]
    pub allowed_paths: BTreeMap<String, String>,
    /// Components: environment variables the guest reads (none by default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Services (by name, from `services`) this plugin may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Further names of `config`, `env` and `vm_config` fields that hold
    /// secrets (besides those ending in `password`, `token`, `secret` or
    /// `key`): the admin API shows them as `<redacted>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_fields: Vec<String>,
    /// Whether this entry was read from the operator's own configuration
    /// file (not the admin API, its admin file or etcd): only such entries
    /// may name a precompiled module (`allow_precompiled`). Never read from
    /// or written to any configuration.
    #[serde(skip)]
    #[schemars(skip)]
    pub from_operator_file: bool,
    /// The namespace of the WasmPlugin this entry was made from: what it
    /// may use is that namespace's grant (`config.kubernetes.grants`),
    /// checked where WasmPlugins are read. Never read from or written to
    /// any configuration.
    #[serde(skip)]
    #[schemars(skip)]
    pub kubernetes_namespace: Option<String>,
}

/// `imagePullPolicy` of Kubernetes, Istio and Higress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PullPolicy {
    /// A tag pulled before is served from this node's store.
    IfNotPresent,
    /// A tag is resolved at the registry on every load of the configuration.
    Always,
}

/// How an `oci://` module's registry is reached. Credentials, when none are
/// given, come from Docker's `config.json` (`docker login`, `oras login`),
/// else none are sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The registries (`host[:port]`, as in `oci://host:port/...`) these
    /// credentials and `plain_http` are for; a module from another registry
    /// is pulled without them (Docker's `config.json` for its host, else
    /// anonymously). Required for credentials in `kubernetes.registry`,
    /// which apply to every WasmPlugin: without it, any WasmPlugin could
    /// name a registry of its own and receive them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Plain HTTP instead of HTTPS: only for a registry on a trusted
    /// network (a local one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_http: bool,
    /// PEM file of CA certificates the registry's certificate may chain to
    /// (a private CA), besides the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Basic auth (or the token flow's credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Secret: never shown back by the admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The environment variable that holds the password instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// A registry access token sent as `Bearer` as is. Secret: never shown
    /// back by the admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The environment variable that holds the token instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Largest module (and layer) pulled, in MiB (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mb: Option<u64>,
    /// Deadline of a pull, in milliseconds (default 60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl RegistryConfig {
    /// Whether it holds credentials (or names variables that do).
    pub fn has_credentials(&self) -> bool {
        self.username.is_some()
            || self.password.is_some()
            || self.password_env.is_some()
            || self.token.is_some()
            || self.token_env.is_some()
    }

    /// These settings for a module of registry `host` (`host[:port]`):
    /// without the credentials and `plain_http` when `hosts` does not
    /// name it.
    pub fn for_host(&self, host: &str) -> RegistryConfig {
        if self.hosts.is_empty() || self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return self.clone();
        }
        RegistryConfig {
            hosts: self.hosts.clone(),
            ca_file: self.ca_file.clone(),
            max_mb: self.max_mb,
            timeout_ms: self.timeout_ms,
            ..RegistryConfig::default()
        }
    }

    /// The settings with secrets replaced, as the admin API shows them.
    pub fn redacted(&self) -> RegistryConfig {
        let hide = |secret: &Option<String>| secret.as_ref().map(|_| "<redacted>".to_string());
        RegistryConfig {
            password: hide(&self.password),
            token: hide(&self.token),
            ..self.clone()
        }
    }
}

impl PluginConfig {
    /// Whether the module is in an OCI registry.
    pub fn is_oci(&self) -> bool {
        self.wasm.to_str().is_some_and(|w| w.starts_with("oci://"))
    }
}

fn default_pool_idle_timeout_ms() -> u64 {
    30_000
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
    /// A `wasi:http` component (told from the binary itself under `auto`).
    Component,
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

/// Pool sizes and service grants (`services` holds the declared names).
pub(crate) fn check(
    plugins: &[PluginConfig],
    services: &HashSet<&str>,
    problem: &mut dyn FnMut(String, String),
) {
    for (i, p) in plugins.iter().enumerate() {
        let at = crate::names::entry("plugins", i, &p.name);
        if p.pool_size == 0 {
            problem(format!("{at}.pool_size"), "must be at least 1".into());
        }
        check_registry(p, &at, problem);
        for (j, name) in p.services.iter().enumerate() {
            if !services.contains(name.as_str()) {
                problem(
                    format!("{at}.services[{j}]"),
                    format!("no service named `{name}` in `services`"),
                );
            }
        }
    }
}

/// `pull` and `registry` belong to `oci://` modules; credentials are one
/// kind at a time, each given once.
fn check_registry(p: &PluginConfig, at: &str, problem: &mut dyn FnMut(String, String)) {
    if !p.is_oci() {
        for (field, given) in [
            ("pull", p.pull.is_some()),
            ("registry", p.registry.is_some()),
        ] {
            if given {
                problem(
                    format!("{at}.{field}"),
                    "only for a module in an OCI registry (`wasm: oci://...`)".into(),
                );
            }
        }
        return;
    }
    let Some(r) = &p.registry else { return };
    let at = format!("{at}.registry");
    if r.password.is_some() && r.password_env.is_some() {
        problem(
            at.clone(),
            "give `password` or `password_env`, not both".into(),
        );
    }
    if r.token.is_some() && r.token_env.is_some() {
        problem(at.clone(), "give `token` or `token_env`, not both".into());
    }
    let has_password = r.password.is_some() || r.password_env.is_some();
    let has_token = r.token.is_some() || r.token_env.is_some();
    if r.username.is_some() != has_password {
        problem(
            at.clone(),
            "`username` and `password` (or `password_env`) go together".into(),
        );
    }
    if has_token && r.username.is_some() {
        problem(
            at.clone(),
            "give a `token` or a `username`, not both".into(),
        );
    }
    if r.max_mb == Some(0) || r.timeout_ms == Some(0) {
        problem(at, "`max_mb` and `timeout_ms` must be at least 1".into());
    }
}

/// A filter list refers only to declared plugins.
pub(crate) fn check_filters(
    field: &str,
    list: &[FilterRef],
    plugins: &HashSet<&str>,
    problem: &mut dyn FnMut(String, String),
) {
    for (j, f) in list.iter().enumerate() {
        if !plugins.contains(f.plugin.as_str()) {
            problem(
                format!("{field}[{j}].plugin"),
                crate::routes::undeclared("plugin", &f.plugin, plugins),
            );
        }
    }
}
