//! What plugins that do not come from the operator's own file may be given
//! (docs/security.md, "Who may grant what"). The node's file is the
//! operator's; the admin API, etcd and Kubernetes are written by others
//! (an admin token's holder, whoever can write etcd, a namespace's owner).
//! A plugin from them may reach hosts, directories, services and
//! environment variables only within what the node's file grants: `grants`
//! for the admin API and etcd, `config.kubernetes.grants` per namespace for
//! WasmPlugins. Nothing is granted by default. An entry asking for more is
//! refused whole, with the field and what the node's file would have to say.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::PluginConfig;

/// The bounds of what plugins from the admin API and etcd may be granted.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Host globs such plugins' `allowed_hosts` may name: each pattern they
    /// ask for must be matched, as written, by one of these (`*.example.com`
    /// covers `api.example.com` and `*.example.com`, not `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Absolute host directories such plugins' `allowed_paths` may open,
    /// with what is below them; `ro:` before one grants read-only access
    /// only (the plugin must then ask with `ro:` too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_paths: Vec<String>,
    /// Services (by name) such plugins may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Environment variables such plugins' registry settings may read
    /// (`password_env`, `token_env`): names, or prefixes ending in `*`
    /// (`WASMGATE_REGISTRY_*`). `WASMGATE_ADMIN_TOKEN` never.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// What the WasmPlugins of one Kubernetes namespace may use.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamespaceGrant {
    /// Services (by name, from the node's file or the services ConfigMap)
    /// the namespace's WasmPlugins may name. A service of the services
    /// ConfigMap is its own namespace's without a grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Absolute directories on the node the namespace's WasmPlugins may
    /// load modules from (`file://` URLs); none by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// The variable no plugin may read, whatever is granted.
const NEVER: &str = "WASMGATE_ADMIN_TOKEN";

impl Grants {
    pub fn is_empty(&self) -> bool {
        *self == Grants::default()
    }

    /// Why `plugin` (not from the operator's file) asks for more than these
    /// grants: (field under `at`, reason) for each refusal.
    pub fn refusals(&self, plugin: &PluginConfig, at: &str) -> Vec<(String, String)> {
        let mut refused = Vec::new();
        for (j, host) in plugin.allowed_hosts.iter().enumerate() {
            if !self.allowed_hosts.iter().any(|g| host_covered(g, host)) {
                refused.push((
                    format!("{at}.allowed_hosts[{j}]"),
                    format!("`{host}` is not granted to plugins from the admin API or etcd: the node's file must cover it in `grants.allowed_hosts`"),
                ));
            }
        }
        for host_dir in plugin.allowed_paths.keys() {
            if let Err(why) = path_covered(&self.allowed_paths, host_dir) {
                refused.push((
                    format!("{at}.allowed_paths.{host_dir}"),
                    format!("{why}: plugins from the admin API or etcd reach only directories under `grants.allowed_paths` of the node's file"),
                ));
            }
        }
        for (j, service) in plugin.services.iter().enumerate() {
            if !self.services.contains(service) {
                refused.push((
                    format!("{at}.services[{j}]"),
                    format!("service `{service}` is not granted to plugins from the admin API or etcd: the node's file must list it in `grants.services`"),
                ));
            }
        }
        refused.extend(env_refusals(plugin, at, &self.env, "`grants.env`"));
        refused
    }
}

impl NamespaceGrant {
    /// Why `plugin`, a WasmPlugin of `namespace`, asks for more than the
    /// namespace is granted (`own_services`: the services ConfigMap's, when
    /// it is in this namespace; `registry_env`: the variables the node's own
    /// `kubernetes.registry` reads).
    pub fn refusals(
        &self,
        plugin: &PluginConfig,
        namespace: &str,
        own_services: &[String],
        registry_env: &[&str],
    ) -> Vec<(String, String)> {
        let mut refused = Vec::new();
        for (j, service) in plugin.services.iter().enumerate() {
            if !self.services.contains(service) && !own_services.contains(service) {
                refused.push((
                    format!("services[{j}]"),
                    format!("service `{service}` is not granted to namespace `{namespace}`: the node's file must list it in `config.kubernetes.grants.{namespace}.services`"),
                ));
            }
        }
        if let Some(path) = local_module(plugin) {
            if let Err(why) = path_covered(&self.files, &path) {
                refused.push((
                    "url".into(),
                    format!("{why}: namespace `{namespace}` loads modules only from directories in `config.kubernetes.grants.{namespace}.files` of the node's file"),
                ));
            }
        }
        let granted: Vec<String> = registry_env.iter().map(|v| v.to_string()).collect();
        refused.extend(env_refusals(
            plugin,
            "",
            &granted,
            "the node's own `kubernetes.registry`",
        ));
        refused
    }
}

/// A module on the node's disk (not a URL or a registry): its path.
fn local_module(plugin: &PluginConfig) -> Option<String> {
    let wasm = plugin.wasm.to_str().unwrap_or_default();
    if wasm.starts_with("oci://") || wasm.starts_with("http://") || wasm.starts_with("https://") {
        return None;
    }
    Some(wasm.strip_prefix("file://").unwrap_or(wasm).to_string())
}

fn env_refusals(
    plugin: &PluginConfig,
    at: &str,
    granted: &[String],
    where_granted: &str,
) -> Vec<(String, String)> {
    let Some(registry) = &plugin.registry else {
        return Vec::new();
    };
    let prefix = if at.is_empty() {
        "registry".to_string()
    } else {
        format!("{at}.registry")
    };
    [
        ("password_env", &registry.password_env),
        ("token_env", &registry.token_env),
    ]
    .into_iter()
    .filter_map(|(field, name)| Some((field, name.as_ref()?)))
    .filter(|(_, name)| !env_covered(granted, name))
    .map(|(field, name)| {
        (
            format!("{prefix}.{field}"),
            format!("${name} is not granted to this plugin's source: only variables in {where_granted} may be read"),
        )
    })
    .collect()
}

/// Whether the host glob `granted` covers the pattern `asked` as written.
fn host_covered(granted: &str, asked: &str) -> bool {
    if granted == asked {
        return true;
    }
    // Glob matching with `*` for any run of characters (a `*` in `asked`
    // is matched only by one in `granted`).
    let (g, a) = (granted.as_bytes(), asked.as_bytes());
    let (mut gi, mut ai, mut star, mut mark) = (0, 0, None, 0);
    while ai < a.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some(gi);
            mark = ai;
            gi += 1;
        } else if gi < g.len() && g[gi].eq_ignore_ascii_case(&a[ai]) {
            gi += 1;
            ai += 1;
        } else if let Some(s) = star {
            gi = s + 1;
            mark += 1;
            ai = mark;
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

/// Whether the host directory `asked` (with `ro:` when read-only) lies under
/// one of the `granted` directories; why not otherwise.
fn path_covered(granted: &[String], asked: &str) -> Result<(), String> {
    let (read_only, dir) = match asked.strip_prefix("ro:") {
        Some(dir) => (true, dir),
        None => (false, asked),
    };
    let path = Path::new(dir);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!(
            "`{dir}` is not an absolute path without `.` or `..`"
        ));
    }
    let covers = |g: &String| {
        let (g_read_only, g_dir) = match g.strip_prefix("ro:") {
            Some(d) => (true, d),
            None => (false, g.as_str()),
        };
        path.starts_with(g_dir) && (read_only || !g_read_only)
    };
    if granted.iter().any(covers) {
        Ok(())
    } else {
        Err(format!("`{asked}` is not under a granted directory"))
    }
}

fn env_covered(granted: &[String], name: &str) -> bool {
    name != NEVER
        && granted.iter().any(|g| match g.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => g == name,
        })
}

/// The namespace grants of a Kubernetes node, by namespace.
pub type NamespaceGrants = BTreeMap<String, NamespaceGrant>;

/// The node file's own checks of its grants: directories absolute.
pub(crate) fn check(field: &str, dirs: &[String], problem: &mut dyn FnMut(String, String)) {
    for (i, dir) in dirs.iter().enumerate() {
        let plain = dir.strip_prefix("ro:").unwrap_or(dir);
        if !Path::new(plain).is_absolute() {
            problem(
                format!("{field}[{i}]"),
                format!("`{plain}` must be an absolute directory"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_glob_covers_what_it_matches_as_written() {
        assert!(host_covered("*.example.com", "api.example.com"));
        assert!(host_covered("*.example.com", "*.example.com"));
        assert!(host_covered("*.example.com", "*.eu.example.com"));
        assert!(!host_covered("*.example.com", "*"));
        assert!(!host_covered("*.example.com", "example.com"));
        assert!(!host_covered("api.example.com", "*.example.com"));
        assert!(host_covered("*", "anything"));
    }

    #[test]
    fn a_directory_is_granted_with_what_is_below_it_and_no_more() {
        let granted = ["/srv/data".to_string(), "ro:/srv/read".to_string()];
        assert!(path_covered(&granted, "/srv/data/cache").is_ok());
        assert!(path_covered(&granted, "ro:/srv/data").is_ok());
        assert!(path_covered(&granted, "ro:/srv/read/x").is_ok());
        assert!(
            path_covered(&granted, "/srv/read/x").is_err(),
            "read-write under a read-only grant"
        );
        assert!(path_covered(&granted, "/srv/data/../../etc").is_err());
        assert!(
            path_covered(&granted, "/srv/database").is_err(),
            "a sibling sharing a prefix"
        );
        assert!(path_covered(&granted, "data").is_err());
        assert!(path_covered(&granted, "/").is_err());
    }

    #[test]
    fn variables_by_name_or_prefix_and_never_the_admin_token() {
        let granted = [
            "REGISTRY_*".to_string(),
            "PULL_TOKEN".to_string(),
            "*".to_string(),
        ];
        assert!(env_covered(&granted[..2], "REGISTRY_PASSWORD"));
        assert!(env_covered(&granted[..2], "PULL_TOKEN"));
        assert!(!env_covered(&granted[..2], "AWS_SECRET_ACCESS_KEY"));
        assert!(!env_covered(&granted, "WASMGATE_ADMIN_TOKEN"));
    }
}
