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
                format!("no plugin named `{}` in `plugins`", f.plugin),
            );
        }
    }
}
