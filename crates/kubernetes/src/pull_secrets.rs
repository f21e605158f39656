//! How a WasmPlugin's `oci://` module is pulled: the node's registry
//! settings for every WasmPlugin (`kubernetes.registry`: a private CA,
//! plain HTTP inside the cluster), with the credentials of the plugin's
//! `imagePullSecret`, a Secret of type `kubernetes.io/dockerconfigjson`
//! in its namespace as `kubectl create secret docker-registry` makes it
//! (Higress's field of the same name, Kubernetes' own for pods).

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde::Deserialize;
use wasmgate_config::RegistryConfig;

use crate::wasmplugin::WasmPlugin;

/// The Secret type `kubectl create secret docker-registry` makes: the only
/// one watched for pull credentials.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

/// What every WasmPlugin's pull starts from, and the pull Secrets seen.
pub struct Pulls<'a> {
    pub defaults: Option<&'a RegistryConfig>,
    pub secrets: &'a [Secret],
    /// Named Secrets the node may not read.
    pub unreadable: &'a crate::secrets::Unreadable,
}

/// `.dockerconfigjson`: credentials by registry.
#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    username: Option<String>,
    password: Option<String>,
    /// base64 of `user:password`.
    auth: Option<String>,
    /// A bearer token for the registry itself.
    registrytoken: Option<String>,
}

impl Pulls<'_> {
    /// The registry settings of `plugin`'s pull (None: not an `oci://`
    /// module, or nothing to say), or why its pull Secret cannot be used.
    pub fn registry(&self, plugin: &WasmPlugin) -> Result<Option<RegistryConfig>, String> {
        let Some(reference) = plugin.spec.url.trim().strip_prefix("oci://") else {
            return Ok(None);
        };
        let host = reference.split('/').next().unwrap_or_default();
        // The node's defaults carry their credentials only to the
        // registries they name (`hosts`).
        let mut registry = self.defaults.map(|d| d.for_host(host));
        let Some(name) = &plugin.spec.image_pull_secret else {
            return Ok(registry);
        };
        let namespace = plugin.namespace().unwrap_or_default();
        let secret = (self.secrets.iter())
            .find(|s| s.name_any() == *name && s.namespace().as_deref() == Some(&namespace))
            .ok_or_else(|| {
                let why =
                    crate::secrets::missing(self.unreadable, &namespace, name, DOCKER_CONFIG_JSON);
                format!("imagePullSecret: {why}")
            })?;
        let auth = credentials(secret, host)
            .map_err(|why| format!("imagePullSecret `{namespace}/{name}`: {why}"))?;
        let r = registry.get_or_insert_with(RegistryConfig::default);
        (r.username, r.password, r.token) = match auth {
            Credentials::Basic(user, password) => (Some(user), Some(password), None),
            Credentials::Token(token) => (None, None, Some(token)),
        };
        (r.password_env, r.token_env) = (None, None);
        Ok(registry)
    }
}

enum Credentials {
    Basic(String, String),
    Token(String),
}

/// The credentials `secret` holds for `host` (`registry:port`).
fn credentials(secret: &Secret, host: &str) -> Result<Credentials, String> {
    let bytes = (secret.data.as_ref())
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or("no `.dockerconfigjson` in it")?;
    let config: DockerConfig = serde_json::from_slice(&bytes.0)
        .map_err(|e| format!("`.dockerconfigjson` is not a Docker config: {e}"))?;
    let auth = (config.auths.iter())
        .find(|(key, _)| registry_host(key) == registry_host(host))
        .map(|(_, auth)| auth)
        .ok_or_else(|| format!("no credentials for registry `{host}` in it"))?;
    if let Some(token) = &auth.registrytoken {
        return Ok(Credentials::Token(token.clone()));
    }
    if let (Some(user), Some(password)) = (&auth.username, &auth.password) {
        return Ok(Credentials::Basic(user.clone(), password.clone()));
    }
    let encoded = auth.auth.as_deref().ok_or_else(|| {
        format!("the entry for `{host}` has no username and password, nor `auth`")
    })?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| format!("the `auth` of `{host}` is not base64 text"))?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| format!("the `auth` of `{host}` is not `user:password`"))?;
    Ok(Credentials::Basic(user.into(), password.into()))
}

/// A Docker config key (`https://registry.example/v1/`, `registry.example`)
/// or a reference's registry as one host name; Docker Hub's several names
/// as one.
fn registry_host(key: &str) -> &str {
    let key = (key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://")))
    .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(url: &str, secret: Option<&str>) -> WasmPlugin {
        serde_json::from_value(json!({
            "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"url": url, "imagePullSecret": secret}
        }))
        .unwrap()
    }

    fn secret(name: &str, config: serde_json::Value) -> Secret {
        let encoded = base64::engine::general_purpose::STANDARD.encode(config.to_string());
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"}, "type": DOCKER_CONFIG_JSON,
            "data": {".dockerconfigjson": encoded}
        }))
        .unwrap()
    }

    #[test]
    fn credentials_come_from_the_docker_config_of_the_plugins_secret() {
        let auth = base64::engine::general_purpose::STANDARD.encode("ci:pa:ss");
        let secrets = [
            secret(
                "explicit",
                json!({"auths": {"reg.example:5000": {"username": "u", "password": "p"}}}),
            ),
            secret(
                "encoded",
                json!({"auths": {"https://reg.example:5000/v1/": {"auth": auth}}}),
            ),
            secret(
                "hub",
                json!({"auths": {"https://index.docker.io/v1/": {"auth": auth}}}),
            ),
            secret(
                "broken",
                json!({"auths": {"reg.example:5000": {"auth": "%%%"}}}),
            ),
        ];
        let defaults = RegistryConfig {
            plain_http: true,
            ..RegistryConfig::default()
        };
        let pulls = Pulls {
            defaults: Some(&defaults),
            secrets: &secrets,
            unreadable: &crate::secrets::NONE_UNREADABLE,
        };
        let got = |url: &str, name: Option<&str>| pulls.registry(&plugin(url, name));
        let r = got("oci://reg.example:5000/f/x:1", Some("explicit"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.plain_http, r.username.as_deref(), r.password.as_deref()),
            (true, Some("u"), Some("p"))
        );
        let r = got("oci://reg.example:5000/f/x:1", Some("encoded"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.username.as_deref(), r.password.as_deref()),
            (Some("ci"), Some("pa:ss"))
        );
        let r = got("oci://docker.io/f/x:1", Some("hub")).unwrap().unwrap();
        assert_eq!(r.username.as_deref(), Some("ci"));
        let r = got("oci://reg.example:5000/f/x:1", None).unwrap().unwrap();
        assert_eq!((r.plain_http, r.username), (true, None));
        assert_eq!(got("file:///p.wasm", Some("explicit")).unwrap(), None);
        let why = |url: &str, name: &str| got(url, Some(name)).unwrap_err();
        assert!(why("oci://reg.example:5000/f/x:1", "gone").contains("no Secret `ns/gone`"));
        assert!(why("oci://other.example/f/x:1", "explicit")
            .contains("no credentials for registry `other.example`"));
        assert!(why("oci://reg.example:5000/f/x:1", "broken").contains("not base64"));

        // The node's default credentials reach only the registries they name.
        let defaults = RegistryConfig {
            hosts: vec!["reg.example:5000".into()],
            username: Some("node".into()),
            password_env: Some("NODE_PULL_PASSWORD".into()),
            plain_http: true,
            ..RegistryConfig::default()
        };
        let pulls = Pulls {
            defaults: Some(&defaults),
            secrets: &secrets,
            unreadable: &crate::secrets::NONE_UNREADABLE,
        };
        let got = |url: &str| pulls.registry(&plugin(url, None)).unwrap().unwrap();
        let ours = got("oci://reg.example:5000/f/x:1");
        assert_eq!(
            (
                ours.username.as_deref(),
                ours.password_env.as_deref(),
                ours.plain_http
            ),
            (Some("node"), Some("NODE_PULL_PASSWORD"), true)
        );
        let theirs = got("oci://attacker.example/x:1");
        assert!(
            !theirs.has_credentials() && !theirs.plain_http,
            "{theirs:?}"
        );
    }
}
