//! Admin changes in file mode, kept apart from the operator's file.
//!
//! In file mode the operator's `wasmgate.yaml` is the source of truth, as in
//! APISIX standalone and Kong DB-less: the admin API reads, and writes only
//! when `admin_writes: true`. Then its changes go to a second file beside
//! the first, `<name>.admin.yaml` (for `wasmgate.yaml`: `wasmgate.admin.yaml`),
//! which holds only what differs from the operator's file: entries added or
//! replaced, and the names of entries deleted. The operator's file is never
//! written, so its comments and layout stay theirs.
//!
//! Loading applies the admin file over the operator's: an entry replaces the
//! one of the same name in place (keeping its position, which matters for
//! routes: the first match wins), a new one is appended, a deleted name is
//! removed. Deleting the admin file (and reloading) drops every admin change.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    CertificateConfig, GatewayConfig, NamedEntry, PluginConfig, RouteConfig, ServiceConfig,
    UpstreamConfig,
};

/// The admin file of the configuration file `config`.
pub fn admin_file_path(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "wasmgate".into());
    config.with_file_name(format!("{stem}.admin.yaml"))
}

/// What the admin API changed, relative to the operator's file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminChanges {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    #[serde(default, skip_serializing_if = "Deleted::is_empty")]
    pub deleted: Deleted,
}

/// Names of entries of the operator's file that the admin API deleted.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
}

impl Deleted {
    fn is_empty(&self) -> bool {
        self.certificates.is_empty()
            && self.services.is_empty()
            && self.plugins.is_empty()
            && self.upstreams.is_empty()
            && self.routes.is_empty()
    }
}

const HEADER: &str = "\
# Changes made through wasmgate's admin API (admin_writes: true), applied over
# the configuration file beside it: entries here replace the entries of the same
# name there, new ones come after its own, and `deleted` names are removed.
# wasmgate rewrites this file on every admin change; delete it and reload to
# drop them all.
";

impl AdminChanges {
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
            && self.services.is_empty()
            && self.plugins.is_empty()
            && self.upstreams.is_empty()
            && self.routes.is_empty()
            && self.deleted.is_empty()
    }

    /// Reads `path`; a missing file is no changes. An error is (field, message).
    pub fn read(path: &Path) -> Result<AdminChanges, (String, String)> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(AdminChanges::default())
            }
            Err(e) => return Err((String::new(), format!("cannot read: {e}"))),
        };
        if text.trim().is_empty() {
            return Ok(AdminChanges::default());
        }
        crate::parse_yaml(&text)
    }

    /// Writes the changes to `path`, or removes it when there are none.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if self.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let yaml = self.to_yaml().map_err(std::io::Error::other)?;
        wasmgate_base::fs::write_atomically(path, format!("{HEADER}{yaml}").as_bytes())
    }

    /// The changes as YAML a person reads: fields left at their defaults
    /// (`prefix: null`, `plugins: []`) are left out when reading the text
    /// back gives the same changes (it always should; the check keeps a
    /// field whose absence would mean something else).
    fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        let mut value = serde_yaml_ng::to_value(self)?;
        drop_defaults(&mut value);
        let short = serde_yaml_ng::to_string(&value)?;
        match serde_yaml_ng::from_str::<AdminChanges>(&short) {
            Ok(back) if back == *self => Ok(short),
            _ => serde_yaml_ng::to_string(self),
        }
    }

    /// Whether the entry a problem's field names (`routes[api].upstream`)
    /// is one these changes put in or deleted: the admin file is where it
    /// comes from, not the operator's file.
    pub fn holds(&self, field: &str) -> bool {
        let Some((section, rest)) = field.split_once('[') else {
            return false;
        };
        let Some((name, _)) = rest.split_once(']') else {
            return false;
        };
        fn named<'a>(
            entries: impl Iterator<Item = &'a str>,
            deleted: &'a [String],
            name: &str,
        ) -> bool {
            entries
                .chain(deleted.iter().map(String::as_str))
                .any(|n| n == name)
        }
        let d = &self.deleted;
        match section {
            "routes" => named(self.routes.iter().map(|e| e.name.as_str()), &d.routes, name),
            "upstreams" => named(
                self.upstreams.iter().map(|e| e.name.as_str()),
                &d.upstreams,
                name,
            ),
            "plugins" => named(
                self.plugins.iter().map(|e| e.name.as_str()),
                &d.plugins,
                name,
            ),
            "services" => named(
                self.services.iter().map(|e| e.name.as_str()),
                &d.services,
                name,
            ),
            "certificates" => named(
                self.certificates.iter().map(|e| e.name.as_str()),
                &d.certificates,
                name,
            ),
            _ => false,
        }
    }

    /// Applies these changes over `config` (the operator's file).
    pub fn apply_to(&self, config: &mut GatewayConfig) {
        apply(
            &mut config.certificates,
            &self.certificates,
            &self.deleted.certificates,
        );
        apply(&mut config.services, &self.services, &self.deleted.services);
        apply(&mut config.plugins, &self.plugins, &self.deleted.plugins);
        apply(
            &mut config.upstreams,
            &self.upstreams,
            &self.deleted.upstreams,
        );
        apply(&mut config.routes, &self.routes, &self.deleted.routes);
    }

    /// The changes that turn `base` (the operator's file) into `desired`.
    pub fn between(base: &GatewayConfig, desired: &GatewayConfig) -> AdminChanges {
        let (certificates, deleted_certificates) = diff(&base.certificates, &desired.certificates);
        let (services, deleted_services) = diff(&base.services, &desired.services);
        let (plugins, deleted_plugins) = diff(&base.plugins, &desired.plugins);
        let (upstreams, deleted_upstreams) = diff(&base.upstreams, &desired.upstreams);
        let (routes, deleted_routes) = diff(&base.routes, &desired.routes);
        AdminChanges {
            certificates,
            services,
            plugins,
            upstreams,
            routes,
            deleted: Deleted {
                certificates: deleted_certificates,
                services: deleted_services,
                plugins: deleted_plugins,
                upstreams: deleted_upstreams,
                routes: deleted_routes,
            },
        }
    }
}

fn apply<T: NamedEntry>(list: &mut Vec<T>, changed: &[T], deleted: &[String]) {
    list.retain(|entry| !deleted.iter().any(|name| name == entry.name()));
    for entry in changed {
        match list.iter_mut().find(|e| e.name() == entry.name()) {
            Some(existing) => *existing = entry.clone(),
            None => list.push(entry.clone()),
        }
    }
}

/// Entries of `desired` that `base` lacks or has otherwise, and names of
/// `base` that `desired` lacks.
fn diff<T: NamedEntry>(base: &[T], desired: &[T]) -> (Vec<T>, Vec<String>) {
    let changed = desired
        .iter()
        .filter(|entry| {
            base.iter()
                .find(|b| b.name() == entry.name())
                .is_none_or(|b| entry.fingerprint() != b.fingerprint())
        })
        .cloned()
        .collect();
    let deleted = base
        .iter()
        .filter(|b| !desired.iter().any(|e| e.name() == b.name()))
        .map(|b| b.name().to_string())
        .collect();
    (changed, deleted)
}

/// Removes nulls and empty lists and maps from mappings, recursively.
fn drop_defaults(value: &mut serde_yaml_ng::Value) {
    use serde_yaml_ng::Value;
    match value {
        Value::Mapping(map) => {
            map.retain(|_, v| {
                drop_defaults(v);
                !matches!(v, Value::Null)
                    && !matches!(v, Value::Sequence(s) if s.is_empty())
                    && !matches!(v, Value::Mapping(m) if m.is_empty())
            });
        }
        Value::Sequence(items) => items.iter_mut().for_each(drop_defaults),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> GatewayConfig {
        GatewayConfig::parse(yaml).unwrap()
    }

    const BASE: &str = "
upstreams: [{name: u, nodes: [{address: 'a:1'}]}]
routes:
  - {name: first, path: {prefix: /a}, upstream: u}
  - {name: second, path: {prefix: /b}, respond: {body: b}}
  - {name: third, respond: {body: c}}
";

    #[test]
    fn changes_round_trip_and_keep_positions() {
        let base = config(BASE);
        let mut desired = base.clone();
        desired.routes[1].respond.as_mut().unwrap().body = "changed".into();
        desired.routes.remove(0);
        desired
            .routes
            .push(config("routes: [{name: new, respond: {}}]").routes[0].clone());
        let changes = AdminChanges::between(&base, &desired);
        assert_eq!(changes.deleted.routes, ["first"]);
        let names: Vec<&str> = changes.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["second", "new"]);
        assert!(changes.upstreams.is_empty());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wasmgate.admin.yaml");
        changes.write(&path).unwrap();
        let read = AdminChanges::read(&path).unwrap();
        assert_eq!(read, changes);
        let mut applied = base.clone();
        read.apply_to(&mut applied);
        let names: Vec<&str> = applied.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["second", "third", "new"]);
        assert_eq!(applied.routes[0].respond.as_ref().unwrap().body, "changed");

        // No difference: no file.
        AdminChanges::between(&base, &base).write(&path).unwrap();
        assert!(!path.exists());
        assert_eq!(AdminChanges::read(&path).unwrap(), AdminChanges::default());
    }

    #[test]
    fn the_admin_file_sits_beside_the_configuration() {
        assert_eq!(
            admin_file_path(Path::new("/etc/wasmgate/gw.yaml")),
            Path::new("/etc/wasmgate/gw.admin.yaml")
        );
    }
}
