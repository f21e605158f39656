//! The vocabulary of the translation (`translate.rs`): what it reads (the
//! [`Snapshot`] of the API server and the [`Node`] itself) and what it
//! makes (the [`Translation`]: the node's configuration, and the
//! conditions it writes back into each resource's status). The parts of
//! the translation (`listeners.rs`, `backends.rs`, `backend_tls.rs`,
//! `secrets.rs`) and the status writer (`status.rs`) speak it too.

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use wasmgate_config::{
    CertificateConfig, PluginConfig, RegistryConfig, RouteConfig, Scheme, ServiceConfig,
    UpstreamConfig,
};

use crate::route_view::RouteKind;
use crate::wasmplugin::WasmPlugin;

/// What the API server holds, as this node last saw it.
#[derive(Default)]
pub struct Snapshot {
    pub classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<GrpcRoute>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub wasmplugins: Vec<WasmPlugin>,
    pub grants: Vec<ReferenceGrant>,
    /// Secrets of type kubernetes.io/tls that listeners name (the node
    /// reads Secrets only by name: `secrets.rs`).
    pub secrets: Vec<Secret>,
    /// For listeners that allow routes from namespaces by label.
    pub namespaces: Vec<Namespace>,
    /// Secrets of type kubernetes.io/dockerconfigjson: WasmPlugins'
    /// `imagePullSecret`s.
    pub pull_secrets: Vec<Secret>,
    pub tls_policies: Vec<BackendTlsPolicy>,
    /// The CAs of BackendTLSPolicies (`ca.crt`), the services' list.
    pub config_maps: Vec<ConfigMap>,
    /// The Secrets the services ConfigMap's services name: passwords.
    pub service_secrets: Vec<Secret>,
    /// Named Secrets the node cannot read (namespace, name), with why.
    pub unreadable_secrets: crate::secrets::Unreadable,
}

impl Snapshot {
    /// Why Secret `namespace/name` is not here: it cannot be read, or
    /// there is no such Secret of type `kind`.
    pub fn missing_secret(&self, namespace: &str, name: &str, kind: &str) -> String {
        crate::secrets::missing(&self.unreadable_secrets, namespace, name, kind)
    }
}

/// A condition to write: `type`, `status`, `reason`, `message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub kind: &'static str,
    pub ok: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    pub(crate) fn yes(
        kind: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            kind,
            ok: true,
            reason,
            message: message.into(),
        }
    }

    pub(crate) fn no(
        kind: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            kind,
            ok: false,
            reason,
            message: message.into(),
        }
    }
}

/// The status of one route toward one of its parents.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteParentStatus {
    pub gateway_namespace: String,
    pub gateway: String,
    pub section_name: Option<String>,
    pub conditions: Vec<Condition>,
}

/// The status of one listener of a Gateway of ours.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerStatus {
    pub name: String,
    pub attached: i32,
    /// The route kinds it takes (`supportedKinds`).
    pub kinds: Vec<&'static str>,
    pub conditions: Vec<Condition>,
}

/// What the node serves, and what it says about each resource.
#[derive(Default)]
pub struct Translation {
    pub routes: Vec<RouteConfig>,
    pub upstreams: Vec<UpstreamConfig>,
    /// The certificates of the HTTPS listeners.
    pub certificates: Vec<CertificateConfig>,
    /// One per WasmPlugin that is not known broken.
    pub plugins: Vec<PluginConfig>,
    /// The services of the `kubernetes.services` ConfigMap ...
    pub services: Vec<ServiceConfig>,
    /// ... or why they cannot be used (the file's services still are).
    pub services_problem: Option<String>,
    /// WasmPlugins: (namespace, name) -> generation, Accepted, how many
    /// routes it runs on.
    pub plugin_status: BTreeMap<(String, String), (Option<i64>, Condition, i64)>,
    /// GatewayClasses of this controller, by name.
    pub classes: Vec<String>,
    /// Gateways served: (namespace, name) -> their listeners.
    pub gateways: BTreeMap<(String, String), Vec<ListenerStatus>>,
    /// Routes with a parent of ours: (kind, namespace, name) -> generation,
    /// one status per such parent, and the `status.parents` entries of
    /// other controllers, kept as they are (the list is written whole).
    pub route_status: BTreeMap<RouteKey, RouteStatus>,
    /// BackendTLSPolicies that cover a backend of a route of ours:
    /// (namespace, name) -> generation, the Gateways of those routes (its
    /// ancestors), its conditions, other controllers' ancestor entries.
    pub policy_status: BTreeMap<(String, String), PolicyStatus>,
}

/// A BackendTLSPolicy's generation, ancestors, conditions and the
/// ancestors other controllers wrote.
pub type PolicyStatus = (
    Option<i64>,
    BTreeSet<(String, String)>,
    Vec<Condition>,
    Vec<serde_json::Value>,
);

/// A route's kind, namespace and name.
pub type RouteKey = (RouteKind, String, String);

/// A route's generation, our parents' statuses, other controllers'.
pub type RouteStatus = (Option<i64>, Vec<RouteParentStatus>, Vec<serde_json::Value>);

/// The Gateway API's group, the default of a reference's `group`.
pub(crate) const GROUP: &str = "gateway.networking.k8s.io";

/// What the translation needs to know of the node itself.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// The GatewayClasses of this `controllerName` are ours.
    pub controller: String,
    /// Gateway listener port -> the node's local port that serves it and
    /// that listener's scheme (`kubernetes.ports`); empty: any port, every
    /// node listener of the Gateway listener's scheme.
    pub ports: BTreeMap<u16, (u16, Scheme)>,
    /// What WasmPlugins' registry pulls start from (`kubernetes.registry`).
    pub registry: Option<RegistryConfig>,
    /// The ConfigMap (namespace, name) that lists services
    /// (`kubernetes.services`).
    pub services: Option<(String, String)>,
    /// What each namespace's WasmPlugins may use (`kubernetes.grants`).
    pub grants: wasmgate_config::grants::NamespaceGrants,
}
