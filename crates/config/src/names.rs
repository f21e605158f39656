//! Names of routes, upstreams, plugins and services: one rule for all, and
//! the trait the admin API and the admin file handle entries through.

use std::collections::HashSet;

use serde::Serialize;

use crate::{
    CertificateConfig, GatewayConfig, PluginConfig, RouteConfig, ServiceConfig, UpstreamConfig,
};

/// An entry of one of the configuration's named lists (plugins, upstreams,
/// routes), as the admin API and the admin file handle them.
pub trait NamedEntry: Serialize + serde::de::DeserializeOwned + Clone {
    /// `route`, `upstream` or `plugin`, for messages.
    const KIND: &'static str;
    fn name(&self) -> &str;
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self>;
    /// The entry as the admin API shows it: secrets replaced
    /// (`secrets.rs`; passwords in service URLs by `***`).
    fn redacted(&self) -> Self {
        self.clone()
    }
    /// The entry a client wrote, with the secrets it was shown redacted
    /// (and wrote back so) taken from `stored`, the entry it replaces.
    fn with_secrets_kept(&self, stored: Option<&Self>) -> Result<Self, String> {
        crate::secrets::restore(self, stored)
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
    /// Secrets in its filters' configurations (by field name).
    fn redacted(&self) -> Self {
        let mut shown = self.clone();
        for filter in &mut shown.plugins {
            if let Some(conf) = &mut filter.conf {
                crate::secrets::redact_json(conf, &[]);
            }
        }
        shown
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

impl NamedEntry for CertificateConfig {
    const KIND: &'static str = "certificate";
    fn name(&self) -> &str {
        &self.name
    }
    /// The private key is never shown back.
    fn redacted(&self) -> Self {
        let mut shown = self.clone();
        if shown.key_pem.is_some() {
            shown.key_pem = Some("<redacted>".into());
        }
        shown
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.certificates
    }
}

impl NamedEntry for PluginConfig {
    const KIND: &'static str = "plugin";
    fn name(&self) -> &str {
        &self.name
    }
    /// The registry's password and token are never shown back, nor
    /// secrets in `config`, `env` and `vm_config` (by field name, or named
    /// in `secret_fields`).
    fn redacted(&self) -> Self {
        use crate::secrets::{is_secret_name, redact_json, REDACTED};
        let mut shown = self.clone();
        shown.registry = shown.registry.as_ref().map(|r| r.redacted());
        let marked = &self.secret_fields;
        for map in [&mut shown.config, &mut shown.env] {
            for (name, value) in map.iter_mut() {
                if is_secret_name(name, marked) {
                    *value = REDACTED.into();
                }
            }
        }
        if let Some(vm_config) = &mut shown.vm_config {
            redact_json(vm_config, marked);
        }
        shown
    }
    fn list(config: &mut GatewayConfig) -> &mut Vec<Self> {
        &mut config.plugins
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

/// How errors name the entry at `index` of `section`: by its name
/// (`routes[api]`), which stays right when the admin API's changes are
/// merged into the file's lists and the indexes move; by its index when it
/// has no usable name.
pub fn entry(section: &str, index: usize, name: &str) -> String {
    if check_name(name).is_ok() {
        format!("{section}[{name}]")
    } else {
        format!("{section}[{index}]")
    }
}

/// Where `config` refers to the entry of kind `kind` (a [`NamedEntry::KIND`])
/// named `name`, as fields (`routes[api].upstream`): what stops it from
/// being deleted.
pub fn references_to(config: &GatewayConfig, kind: &str, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    let routes = config.routes.iter().enumerate();
    match kind {
        "upstream" => {
            for (i, r) in routes {
                if r.upstream.as_deref() == Some(name) {
                    found.push(format!("{}.upstream", entry("routes", i, &r.name)));
                }
            }
        }
        "plugin" => {
            for (i, f) in config.global_plugins.iter().enumerate() {
                if f.plugin == name {
                    found.push(format!("global_plugins[{i}]"));
                }
            }
            for (i, r) in routes {
                let at = entry("routes", i, &r.name);
                for (j, f) in r.plugins.iter().enumerate() {
                    if f.plugin == name {
                        found.push(format!("{at}.plugins[{j}]"));
                    }
                }
                if r.function.as_ref().is_some_and(|f| f.plugin == name) {
                    found.push(format!("{at}.function"));
                }
                if r.component.as_ref().is_some_and(|c| c.plugin == name) {
                    found.push(format!("{at}.component"));
                }
            }
        }
        "service" => {
            for (i, p) in config.plugins.iter().enumerate() {
                if p.services.iter().any(|s| s == name) {
                    found.push(format!("{}.services", entry("plugins", i, &p.name)));
                }
            }
        }
        "certificate" => {
            for (i, l) in config.listeners.iter().enumerate() {
                let tls = l.tls.as_ref();
                if tls.is_some_and(|t| t.certificates.iter().any(|c| c == name)) {
                    found.push(format!("listeners[{i}].tls.certificates"));
                }
            }
        }
        _ => {}
    }
    found
}

pub(crate) fn unique_names<'a>(
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
