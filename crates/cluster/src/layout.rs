//! How a configuration is laid out in etcd: one key per object, so that two
//! edits to different routes never touch the same key.
//!
//! ```text
//! <prefix>/routes/<name>      {"seq": 3, "route": {...}}   (a route entry)
//! <prefix>/upstreams/<name>   {...}                         (an upstream entry)
//! <prefix>/plugins/<name>     {...}
//! <prefix>/services/<name>    {...}
//! <prefix>/certificates/<name> {...}                       (PEM text, `cert_pem` and `key_pem`)
//! <prefix>/global_plugins     [{"plugin": ..., "conf": ...}, ...]
//! <prefix>/changed            {"by": ..., "at_ms": ...} (written with every change)
//! <prefix>/nodes/<node>       the node's registration (under a lease)
//! ```
//!
//! A configuration's revision is the newest mod revision of its keys: equal
//! on every node serving the same configuration, whatever else happened in
//! etcd meanwhile (node registrations are revisions too). `changed` is
//! written in every change's transaction so that a change that only deletes
//! keys moves the revision as well.
//!
//! Routes match in order, so each carries its position (`seq`): a new route
//! goes after every other (as a route added to a file's end), a replaced
//! one keeps its place, `config push` numbers them in file order. Values are
//! the entries' JSON, as `wasmgate.yaml` and the admin API write them.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use wasmgate_config::AdminChanges;
use wasmgate_config::{FilterRef, GatewayConfig, NamedEntry};

/// The kinds of named objects, as key segments.
pub const KINDS: [&str; 5] = ["certificates", "services", "plugins", "upstreams", "routes"];
pub const GLOBAL_PLUGINS: &str = "global_plugins";
pub const CHANGED: &str = "changed";
pub const NODES: &str = "nodes";

/// Key of object `name` of `kind` under `prefix`.
pub fn key(prefix: &str, kind: &str, name: &str) -> String {
    format!("{}/{kind}/{name}", prefix.trim_end_matches('/'))
}

pub fn global_plugins_key(prefix: &str) -> String {
    format!("{}/{GLOBAL_PLUGINS}", prefix.trim_end_matches('/'))
}

pub fn changed_key(prefix: &str) -> String {
    format!("{}/{CHANGED}", prefix.trim_end_matches('/'))
}

/// The value of the `changed` key for a change made by `by`.
pub fn changed_value(by: &str) -> Vec<u8> {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    serde_json::to_vec(&json!({ "by": by, "at_ms": at_ms })).expect("JSON values serialise")
}

/// The revision of the configuration `objects` make: their newest mod
/// revision (0 for none).
pub fn config_revision(objects: &Objects) -> i64 {
    objects
        .values()
        .map(|(revision, _)| *revision)
        .max()
        .unwrap_or(0)
}

pub fn nodes_prefix(prefix: &str) -> String {
    format!("{}/{NODES}/", prefix.trim_end_matches('/'))
}

/// The configuration objects under a prefix: key -> (mod revision, value).
pub type Objects = BTreeMap<String, (i64, Vec<u8>)>;

/// Whether `key` (under `prefix`) holds configuration (not a node's
/// registration or anything else).
pub fn is_config_key(prefix: &str, key: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(prefix.trim_end_matches('/'))
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    rest == GLOBAL_PLUGINS
        || rest == CHANGED
        || KINDS
            .iter()
            .any(|k| rest.strip_prefix(k).is_some_and(|r| r.starts_with('/')))
}

/// `local` (the node's own settings) with the objects of `objects` in it;
/// errors name the key.
pub fn merge(local: &GatewayConfig, prefix: &str, objects: &Objects) -> Result<GatewayConfig> {
    let mut config = local.clone();
    let mut routes: Vec<(u64, String, Value)> = Vec::new();
    let base = prefix.trim_end_matches('/');
    for (key, (_, bytes)) in objects {
        let rest = key
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix('/'))
            .unwrap_or(key);
        let value: Value =
            serde_json::from_slice(bytes).with_context(|| format!("{key}: not JSON"))?;
        if rest == CHANGED {
            continue;
        }
        if rest == GLOBAL_PLUGINS {
            config.global_plugins =
                serde_json::from_value::<Vec<FilterRef>>(value).with_context(|| key.clone())?;
            continue;
        }
        let Some((kind, name)) = rest.split_once('/') else {
            continue;
        };
        let named = |value: Value| -> Result<Value> {
            let mut value = value;
            match value.as_object_mut() {
                Some(object) => {
                    object.insert("name".into(), json!(name));
                    Ok(value)
                }
                None => bail!("{key}: not a JSON object"),
            }
        };
        match kind {
            "routes" => {
                let seq = value.get("seq").and_then(Value::as_u64).unwrap_or(u64::MAX);
                let route = value
                    .get("route")
                    .cloned()
                    .with_context(|| format!("{key}: no `route` in it"))?;
                routes.push((seq, name.to_string(), named(route)?));
            }
            "upstreams" => config
                .upstreams
                .push(serde_json::from_value(named(value)?).with_context(|| key.clone())?),
            "plugins" => config
                .plugins
                .push(serde_json::from_value(named(value)?).with_context(|| key.clone())?),
            "services" => config
                .services
                .push(serde_json::from_value(named(value)?).with_context(|| key.clone())?),
            "certificates" => config
                .certificates
                .push(serde_json::from_value(named(value)?).with_context(|| key.clone())?),
            _ => {}
        }
    }
    routes.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (_, name, route) in routes {
        config
            .routes
            .push(serde_json::from_value(route).with_context(|| format!("route `{name}`"))?);
    }
    Ok(config)
}

/// A route's stored form, at position `seq`.
pub fn route_value(route: &impl serde::Serialize, seq: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({ "seq": seq, "route": without_name(route) }))
        .expect("JSON values serialise")
}

/// Any other entry's stored form (its name is the key's last segment).
pub fn entry_value(entry: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(&without_name(entry)).expect("JSON values serialise")
}

fn without_name(entry: &impl serde::Serialize) -> Value {
    let mut value = serde_json::to_value(entry).expect("configuration entries serialise");
    if let Some(object) = value.as_object_mut() {
        object.remove("name");
    }
    value
}

/// The position of the stored route `bytes` (absent: last).
pub fn route_seq(bytes: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("seq").and_then(Value::as_u64))
        .unwrap_or(0)
}

/// One write of a change: the key, and its new value (None: delete).
pub struct Write {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// The key writes that `changes` makes under `prefix`; new routes get
/// positions after `last_seq`, replaced ones keep theirs (from `objects`).
/// The `changed` key is not among them (see [`changed_key`]).
pub fn writes(
    prefix: &str,
    changes: &AdminChanges,
    objects: &Objects,
    mut last_seq: u64,
) -> Vec<Write> {
    let mut writes = Vec::new();
    let mut named = |kind: &str, name: &str, value: Vec<u8>| {
        writes.push(Write {
            key: key(prefix, kind, name),
            value: Some(value),
        })
    };
    for c in &changes.certificates {
        named("certificates", c.name(), entry_value(c));
    }
    for s in &changes.services {
        named("services", s.name(), entry_value(s));
    }
    for p in &changes.plugins {
        named("plugins", p.name(), entry_value(p));
    }
    for u in &changes.upstreams {
        named("upstreams", u.name(), entry_value(u));
    }
    for r in &changes.routes {
        let seq = match objects.get(&key(prefix, "routes", r.name())) {
            Some((_, bytes)) => route_seq(bytes),
            None => {
                last_seq += 1;
                last_seq
            }
        };
        named("routes", r.name(), route_value(r, seq));
    }
    let deleted = &changes.deleted;
    for (kind, names) in [
        ("certificates", &deleted.certificates),
        ("services", &deleted.services),
        ("plugins", &deleted.plugins),
        ("upstreams", &deleted.upstreams),
        ("routes", &deleted.routes),
    ] {
        for name in names {
            writes.push(Write {
                key: key(prefix, kind, name),
                value: None,
            });
        }
    }
    writes
}

/// Every object of a whole configuration (what `config push` writes), routes
/// numbered in file order, and `changed`.
pub fn all_objects(prefix: &str, config: &GatewayConfig) -> BTreeMap<String, Vec<u8>> {
    let mut objects = BTreeMap::new();
    objects.insert(changed_key(prefix), changed_value("config push"));
    for c in &config.certificates {
        objects.insert(key(prefix, "certificates", &c.name), entry_value(c));
    }
    for s in &config.services {
        objects.insert(key(prefix, "services", &s.name), entry_value(s));
    }
    for p in &config.plugins {
        objects.insert(key(prefix, "plugins", &p.name), entry_value(p));
    }
    for u in &config.upstreams {
        objects.insert(key(prefix, "upstreams", &u.name), entry_value(u));
    }
    for (i, r) in config.routes.iter().enumerate() {
        objects.insert(key(prefix, "routes", &r.name), route_value(r, i as u64 + 1));
    }
    objects.insert(
        global_plugins_key(prefix),
        serde_json::to_vec(&config.global_plugins).expect("JSON values serialise"),
    );
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_round_trips_through_its_keys_in_order() {
        let file = GatewayConfig::parse(
            "upstreams: [{name: u, nodes: [{address: 'a:1'}]}]
routes:
  - {name: zeta, path: {prefix: /z}, upstream: u}
  - {name: alpha, respond: {body: a}}
global_plugins: []
",
        )
        .unwrap();
        let objects: Objects = all_objects("/wg", &file)
            .into_iter()
            .map(|(k, v)| (k, (1, v)))
            .collect();
        assert!(objects.contains_key("/wg/routes/zeta"));
        assert!(is_config_key("/wg", "/wg/changed"));
        assert!(is_config_key("/wg", "/wg/routes/zeta"));
        assert!(!is_config_key("/wg", "/wg/nodes/n1"));
        assert!(!is_config_key("/wg", "/wgx/routes/a"));
        let local = GatewayConfig::parse("listen: 127.0.0.1:1").unwrap();
        let merged = merge(&local, "/wg", &objects).unwrap();
        let names: Vec<&str> = merged.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"], "file order, not key order");
        assert_eq!(merged.listen.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(merged.upstreams[0].name, "u");

        // A new route goes last; a replaced one keeps its place.
        let mut desired = merged.clone();
        desired.routes[0].path.prefix = Some("/zz".into());
        desired.routes.push(
            GatewayConfig::parse("routes: [{name: new, respond: {}}]")
                .unwrap()
                .routes[0]
                .clone(),
        );
        let changes = AdminChanges::between(&merged, &desired);
        let w = writes("/wg", &changes, &objects, 2);
        let seqs: Vec<(String, u64)> = w
            .iter()
            .map(|w| (w.key.clone(), route_seq(w.value.as_deref().unwrap())))
            .collect();
        assert_eq!(
            seqs,
            [("/wg/routes/zeta".into(), 1), ("/wg/routes/new".into(), 3)]
        );
    }
}
