//! Services (Redis, PostgreSQL) as Kubernetes resources: a ConfigMap's
//! `services.yaml` lists them as a node file's `services` does, and each
//! takes its password from a Secret of the ConfigMap's namespace
//! (`password_secret: {name, key}`), so that neither the list nor the
//! passwords live in the node's file, and a rotated Secret reaches every
//! node without a reload.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use serde::Deserialize;
use wasmgate_config::ServiceConfig;

/// The ConfigMap key the services are listed under.
pub const KEY: &str = "services.yaml";

#[derive(Deserialize)]
struct SecretKeyRef {
    name: String,
    key: String,
}

/// The services of ConfigMap `namespace/name` with their passwords, or
/// why they cannot be used (the node then serves with its file's services
/// only, and says so).
pub fn services(
    (namespace, name): (&str, &str),
    config_maps: &[ConfigMap],
    secrets: &[Secret],
    unreadable: &crate::secrets::Unreadable,
) -> Result<Vec<ServiceConfig>, String> {
    let at = format!("ConfigMap `{namespace}/{name}`");
    let text = (config_maps.iter())
        .find(|c| c.namespace().as_deref() == Some(namespace) && c.name_any() == name)
        .ok_or_else(|| format!("{at} does not exist"))?
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .ok_or_else(|| format!("{at} has no `{KEY}`"))?;
    let entries: Vec<serde_json::Value> =
        serde_yaml_ng::from_str(text).map_err(|e| format!("{at}: `{KEY}` is not a list: {e}"))?;
    let mut out = Vec::new();
    for (i, mut entry) in entries.into_iter().enumerate() {
        let at = format!("{at}: services[{i}]");
        let secret_ref = (entry.as_object_mut())
            .and_then(|e| e.remove("password_secret"))
            .map(serde_json::from_value::<SecretKeyRef>)
            .transpose()
            .map_err(|e| format!("{at}.password_secret: {e}"))?;
        let service: ServiceConfig =
            serde_json::from_value(entry).map_err(|e| format!("{at}: {e}"))?;
        // Not the operator's own file: a `password_file` would send a file
        // of the node to the service's host (`from_operator` is false).
        let problems = service.check();
        if let Some((field, why)) = problems.first() {
            return Err(format!("{at}.{field}: {why}"));
        }
        let Some(r) = secret_ref else {
            out.push(service);
            continue;
        };
        let password = (secrets.iter())
            .find(|s| s.namespace().as_deref() == Some(namespace) && s.name_any() == r.name)
            .and_then(|s| s.data.as_ref()?.get(&r.key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(
                || match unreadable.get(&(namespace.to_string(), r.name.clone())) {
                    Some(why) => format!(
                        "{at}.password_secret: Secret `{namespace}/{}` cannot be read: {why}",
                        r.name
                    ),
                    None => format!(
                        "{at}.password_secret: no key `{}` in Secret `{namespace}/{}`",
                        r.key, r.name
                    ),
                },
            )?;
        let password = password.trim_end_matches(['\n', '\r']);
        let service = service
            .with_password(password)
            .map_err(|e| format!("{at}: {e:#}"))?;
        out.push(service);
    }
    Ok(out)
}

/// The Secrets ConfigMap `namespace/name`'s services take passwords from
/// (of its namespace), so that the node watches them by name; nothing when
/// the list cannot be read (`services` then says why).
pub fn password_secrets((namespace, name): (&str, &str), config_maps: &[ConfigMap]) -> Vec<String> {
    let text = (config_maps.iter())
        .find(|c| c.namespace().as_deref() == Some(namespace) && c.name_any() == name)
        .and_then(|c| c.data.as_ref()?.get(KEY));
    let entries: Vec<serde_json::Value> = text
        .and_then(|t| serde_yaml_ng::from_str(t).ok())
        .unwrap_or_default();
    (entries.iter())
        .filter_map(|e| e.get("password_secret")?.get("name")?.as_str())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn passwords_come_from_secrets_of_the_config_maps_namespace() {
        let list = "- {name: cache, redis: \"redis://cache.svc:6379/0\", password_secret: {name: auth, key: redis}}\n- {name: plain, redis: \"redis://other:6379\"}\n";
        let maps: Vec<ConfigMap> = vec![parse(
            json!({"metadata": {"name": "svc", "namespace": "gw"}, "data": {KEY: list}}),
        )];
        let secret = |namespace: &str| -> Secret {
            parse(json!({"metadata": {"name": "auth", "namespace": namespace},
                         "stringData": {}, "data": {"redis": "czNjcmV0Cg=="}}))
        };
        let got = services(
            ("gw", "svc"),
            &maps,
            &[secret("gw")],
            &crate::secrets::NONE_UNREADABLE,
        )
        .unwrap();
        assert_eq!(
            got[0].redis.as_deref(),
            Some("redis://:s3cret@cache.svc:6379/0")
        );
        assert_eq!(got[1].redis.as_deref(), Some("redis://other:6379"));
        let why = services(
            ("gw", "svc"),
            &maps,
            &[secret("elsewhere")],
            &crate::secrets::NONE_UNREADABLE,
        )
        .unwrap_err();
        assert!(why.contains("no key `redis` in Secret `gw/auth`"), "{why}");
        assert!(
            services(("gw", "nope"), &maps, &[], &crate::secrets::NONE_UNREADABLE)
                .unwrap_err()
                .contains("does not exist")
        );
        let bad: Vec<ConfigMap> = vec![parse(
            json!({"metadata": {"name": "svc", "namespace": "gw"}, "data": {KEY: "- {name: x, redis: \"redis://h\", password_file: /etc/shadow}"}}),
        )];
        let why = services(("gw", "svc"), &bad, &[], &crate::secrets::NONE_UNREADABLE).unwrap_err();
        assert!(why.contains("password_file"), "{why}");
    }
}
