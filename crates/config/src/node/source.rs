//! Where a node's shared configuration comes from when not from its own
//! file: etcd (`config.etcd`) or the Kubernetes API server
//! (`config.kubernetes`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a node's routes, upstreams, plugins and services are kept when not
/// in its own file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigSource {
    /// etcd endpoints (`http://127.0.0.1:2379`), v3 API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd: Vec<String>,
    /// Or a Kubernetes API server: the node serves the Gateway API
    /// resources of its GatewayClass (docs/kubernetes.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSource>,
    /// The key prefix every object lives under.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Where the node keeps the last configuration it applied, to start
    /// from it while etcd is unreachable (none: it waits for etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_file: Option<PathBuf>,
    /// This node's name in the cluster view (default: the listen address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// TLS to etcd: its CA and this node's client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_tls: Option<crate::etcd_access::EtcdTls>,
    /// etcd's user and password, when etcd has `auth enable`d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_auth: Option<crate::etcd_access::EtcdAuth>,
    /// Keys sealing every configuration object in etcd (docs/cluster.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::etcd_access::Encryption>,
}

fn default_prefix() -> String {
    "/wasmgate".into()
}

/// How a node reaches its Kubernetes API server and which resources it
/// serves.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSource {
    /// A kubeconfig file (relative to this file); absent: `$KUBECONFIG`,
    /// `~/.kube/config`, else the pod's service account (in-cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The GatewayClasses whose `spec.controllerName` is this are the
    /// node's; their Gateways and the routes attached to them are served.
    #[serde(default = "default_controller_name")]
    pub controller_name: String,
    /// Where the replicas' Lease lives: the one holding it writes the
    /// statuses. Default: `$POD_NAMESPACE`, else the pod's own namespace,
    /// else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_namespace: Option<String>,
    /// Gateway listener port -> the local port of this node's listener that
    /// serves it (`{80: 8080, 443: 8443}`): a route attached to a Gateway
    /// listener is served only on the node listener its port maps to, and
    /// a Gateway listener whose port is not here is refused in its status
    /// (`PortUnavailable`). Empty: every Gateway listener is served on
    /// every node listener of its scheme, whatever its port.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<u16, u16>,
    /// How WasmPlugins' `oci://` modules are pulled: a private CA, plain
    /// HTTP for a registry inside the cluster, limits. Credentials come
    /// from each WasmPlugin's `imagePullSecret`, else from these, else from
    /// the node's Docker config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<crate::RegistryConfig>,
    /// `namespace/name` of a ConfigMap whose `services.yaml` lists more
    /// services (Redis, PostgreSQL) as `services` does, each password from
    /// a Secret of that namespace (`password_secret: {name, key}`);
    /// followed like every other resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<String>,
    /// What each namespace's WasmPlugins may use beyond the services of a
    /// services ConfigMap in that namespace: services by name and
    /// directories of modules on the node (`file://`). Nothing by default
    /// (docs/security.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grants: crate::grants::NamespaceGrants,
}

fn default_controller_name() -> String {
    "wasmgate.io/gateway-controller".into()
}

impl ConfigSource {
    /// `config` names exactly one source; a Kubernetes source's `ports` map
    /// to ports this node listens on (`local_ports`).
    pub(crate) fn check(&self, local_ports: &[u16], problem: &mut dyn FnMut(String, String)) {
        if let Some(k) = &self.kubernetes {
            if (k.services.as_deref()).is_some_and(|s| {
                !s.split_once('/')
                    .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty())
            }) {
                problem(
                    "config.kubernetes.services".into(),
                    "`namespace/name` of a ConfigMap".into(),
                );
            }
            if k.registry
                .as_ref()
                .is_some_and(|r| r.has_credentials() && r.hosts.is_empty())
            {
                problem(
                    "config.kubernetes.registry.hosts".into(),
                    "credentials here apply to every WasmPlugin: name the registries they are for (`hosts: [registry.example.com]`), or any WasmPlugin could send them to a registry of its own".into(),
                );
            }
            for (namespace, grant) in &k.grants {
                crate::grants::check(
                    &format!("config.kubernetes.grants.{namespace}.files"),
                    &grant.files,
                    problem,
                );
            }
            for (gateway_port, local) in &k.ports {
                if !local_ports.contains(local) {
                    problem(
                        format!("config.kubernetes.ports.{gateway_port}"),
                        format!(
                            "this node has no listener on port {local} (`listen`, `listeners`)"
                        ),
                    );
                }
            }
        }
        crate::etcd_access::check(
            &self.etcd,
            self.etcd_tls.as_ref(),
            self.etcd_auth.as_ref(),
            self.encryption.as_ref(),
            problem,
        );
        match (self.etcd.is_empty(), &self.kubernetes) {
            (true, None) => problem(
                "config".into(),
                "name a source: `etcd: [endpoints]` or `kubernetes: {...}`".into(),
            ),
            (false, Some(_)) => problem(
                "config".into(),
                "`etcd` and `kubernetes` are two sources; name one".into(),
            ),
            _ => {}
        }
    }
}
