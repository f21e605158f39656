//! The `WasmPlugin` resource (`wasmgate.io/v1alpha1`): a Proxy-Wasm filter
//! as a Kubernetes object, shaped after Higress's and Istio's resources of
//! the same name so that theirs translate field by field
//! (docs/kubernetes.md has the mapping). Its CRD is generated from these
//! types (`deploy/kubernetes/wasmplugin-crd.yaml`, checked by a test).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API group of wasmgate's own resources.
pub const GROUP: &str = "wasmgate.io";

/// A filter for the routes of the Gateways in its namespace, or of the
/// Gateways, HTTPRoutes and GRPCRoutes its `targetRefs` name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "wasmgate.io",
    version = "v1alpha1",
    kind = "WasmPlugin",
    namespaced,
    status = "WasmPluginStatus",
    shortname = "wgp",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.url"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Routes","type":"integer","jsonPath":".status.attachedRoutes"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginSpec {
    /// Where the module is: `oci://registry/repository[:tag][@sha256:...]`,
    /// `https://...` (with `sha256`), or a path on the node (`file:///...`).
    pub url: String,
    /// SHA-256 (hex) of the module, or of the image for `oci://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// When the registry is asked what a tag points to (default: `Always`
    /// for `latest` and untagged images, else `IfNotPresent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// A Secret of type `kubernetes.io/dockerconfigjson` in this namespace
    /// (`kubectl create secret docker-registry`) with the credentials of
    /// the `oci://` module's registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,
    /// The plugin's root context id (`root_id`), as Higress's `pluginName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_name: Option<String>,
    /// Where in the chain: `AUTHN` runs first, then `AUTHZ`, `STATS`, and
    /// `UNSPECIFIED_PHASE` (the default) last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Within a phase, higher runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// What a request gets when the filter crashes or cannot be loaded:
    /// `FAIL_CLOSE` (the default) a 5xx, `FAIL_OPEN` the filter skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_strategy: Option<FailStrategy>,
    /// The configuration of every route the plugin applies to that no
    /// match rule names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub default_config: Option<Value>,
    /// Apply the plugin only where a match rule says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_config_disable: Option<bool>,
    /// Per-route and per-domain configuration; the first rule that matches
    /// a route wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_rules: Vec<MatchRule>,
    /// The Gateways, HTTPRoutes and GRPCRoutes (in this namespace) the plugin applies
    /// to; absent: the routes of every Gateway in this namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_refs: Vec<TargetRef>,
    /// Services (Redis, PostgreSQL) declared in the node's file that the
    /// plugin may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// What the module is: a Proxy-Wasm filter (`ProxyWasm`, the default),
    /// or what serves a rule named in its `backendRefs`: a `wasi:http`
    /// component (`Component`) or an Extism plugin (`Extism`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<WasmPluginKind>,
    /// `Extism`: the function a rule's requests call (absent: the last
    /// segment of the request's path names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum WasmPluginKind {
    #[default]
    ProxyWasm,
    Component,
    Extism,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchRule {
    /// HTTPRoutes or GRPCRoutes, `name` (in the plugin's namespace) or `namespace/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub route: Vec<String>,
    /// Hosts, `api.example.com` or `*.example.com`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain: Vec<String>,
    /// The plugin's configuration where this rule matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config: Option<Value>,
    /// Do not apply the plugin where this rule matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_disable: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// `gateway.networking.k8s.io` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Gateway`, `HTTPRoute` or `GRPCRoute`.
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ImagePullPolicy {
    IfNotPresent,
    Always,
}

/// Istio's and Higress's phases, in the order they run.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema,
)]
pub enum Phase {
    #[serde(rename = "AUTHN")]
    Authn,
    #[serde(rename = "AUTHZ")]
    Authz,
    #[serde(rename = "STATS")]
    Stats,
    #[serde(rename = "UNSPECIFIED_PHASE")]
    Unspecified,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum FailStrategy {
    #[serde(rename = "FAIL_CLOSE")]
    Close,
    #[serde(rename = "FAIL_OPEN")]
    Open,
}

/// What the node that writes statuses says about the plugin.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginStatus {
    #[serde(default)]
    pub conditions: Vec<StatusCondition>,
    /// Routes the plugin runs on.
    #[serde(default)]
    pub attached_routes: i64,
}

/// A condition as Kubernetes writes them (`metav1.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    #[serde(default)]
    pub observed_generation: i64,
    pub last_transition_time: String,
}

/// Any JSON object: a plugin's configuration is the plugin's business.
fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The CRD as YAML, for `deploy/kubernetes/wasmplugin-crd.yaml`.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let mut text = String::from(
        "# Generated from crates/kubernetes/src/wasmplugin.rs (a test checks it matches).\n",
    );
    text.push_str(&serde_yaml_ng::to_string(&WasmPlugin::crd()).expect("the CRD serializes"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in CRD is the one these types describe.
    #[test]
    fn the_checked_in_crd_is_generated_from_the_types() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/kubernetes/wasmplugin-crd.yaml"
        );
        if std::env::var_os("WASMGATE_WRITE_CRD").is_some() {
            std::fs::write(path, crd_yaml()).unwrap();
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == crd_yaml(),
            "{path} differs from the types: regenerate it with \
             WASMGATE_WRITE_CRD=1 cargo test -p wasmgate-kubernetes the_checked_in_crd"
        );
    }

    #[test]
    fn a_higress_style_resource_parses() {
        let wp: WasmPlugin = serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "key-auth", "namespace": "gw"},
            "spec": {
                "url": "oci://registry.example/plugins/key-auth:1.0.0",
                "phase": "AUTHN", "priority": 310, "failStrategy": "FAIL_CLOSE",
                "defaultConfig": {"consumers": [{"name": "c1", "credential": "k1"}], "keys": ["x-api-key"]},
                "matchRules": [{"route": ["shop/orders"], "config": {"allow": ["c1"]}},
                               {"domain": ["*.internal.example"], "configDisable": true}]
            }
        }))
        .unwrap();
        assert_eq!(wp.spec.phase, Some(Phase::Authn));
        assert_eq!(wp.spec.match_rules[1].config_disable, Some(true));
        assert!(Phase::Authn < Phase::Unspecified);
    }
}
