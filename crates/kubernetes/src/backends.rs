//! A rule's `backendRefs` to the nodes of one upstream: each Service's
//! ready endpoints (from its EndpointSlices), its share of the traffic its
//! `weight`, what they speak from the route's kind and the port's
//! `appProtocol`; and the ReferenceGrants that let a route (or a Gateway's
//! certificate) reach into another namespace.

use k8s_openapi::api::core::v1::ServicePort;
use kube::ResourceExt;
use wasmgate_config::{NodeConfig, UpstreamConfig, UpstreamProtocol, UpstreamTls};

use crate::backend_tls::TlsPolicies;
use crate::model::{Condition, Snapshot, GROUP};
use crate::route_view::{BackendRef, RouteKind};

/// The nodes of one rule's backends, and what they speak.
pub struct Backend {
    pub nodes: Vec<NodeConfig>,
    pub protocol: UpstreamProtocol,
    /// The BackendTLSPolicy (its index) that covers the Services, and the
    /// TLS it gives them (Err: why they cannot be reached).
    pub tls: Option<(usize, Result<UpstreamTls, String>)>,
}

impl Backend {
    /// The upstream, or why the rule cannot reach it (a policy whose CAs
    /// cannot be used: never plain text instead).
    pub fn upstream(self, name: String) -> Result<UpstreamConfig, String> {
        let yaml = serde_json::json!({"name": name, "nodes": self.nodes});
        let mut upstream: UpstreamConfig =
            serde_json::from_value(yaml).expect("an upstream with defaults");
        upstream.protocol = self.protocol;
        if let Some((_, tls)) = self.tls {
            upstream.tls = Some(tls?);
            if upstream.protocol == UpstreamProtocol::H2c {
                upstream.protocol = UpstreamProtocol::H2;
            }
        }
        Ok(upstream)
    }
}

/// The nodes of a rule's backendRefs, each Service's weight shared among
/// its ready endpoints; or the ResolvedRefs condition saying which did not
/// resolve.
pub fn backend(
    kind: RouteKind,
    backends: &[BackendRef],
    namespace: &str,
    snapshot: &Snapshot,
    policies: &TlsPolicies,
) -> Result<Backend, Condition> {
    let mut nodes = Vec::new();
    let mut protocol = kind.default_protocol();
    let mut covered: Option<Option<usize>> = None;
    for backend in backends {
        let group = backend.group.as_deref().unwrap_or("");
        let kind_name = backend.kind.as_deref().unwrap_or("Service");
        if !group.is_empty() || kind_name != "Service" {
            return Err(Condition::no(
                "ResolvedRefs",
                "InvalidKind",
                format!(
                    "backendRef {}: only Services are supported, not {group}/{kind_name}",
                    backend.name
                ),
            ));
        }
        let service_ns = backend.namespace.as_deref().unwrap_or(namespace);
        if service_ns != namespace
            && !granted(
                snapshot,
                kind.name(),
                namespace,
                "Service",
                service_ns,
                &backend.name,
            )
        {
            return Err(Condition::no(
                "ResolvedRefs",
                "RefNotPermitted",
                format!(
                    "backendRef {}: Service `{}` in namespace `{service_ns}` needs a ReferenceGrant there from {}s of namespace `{namespace}`",
                    backend.name, backend.name, kind.name()
                ),
            ));
        }
        let weight = backend.weight.unwrap_or(1);
        if weight == 0 {
            continue;
        }
        let Some(service) = (snapshot.services.iter())
            .find(|s| s.name_any() == backend.name && s.namespace().as_deref() == Some(service_ns))
        else {
            return Err(Condition::no(
                "ResolvedRefs",
                "BackendNotFound",
                format!(
                    "backendRef {}: no Service `{}` in namespace `{service_ns}`",
                    backend.name, backend.name
                ),
            ));
        };
        let Some(port) = backend.port else {
            return Err(Condition::no(
                "ResolvedRefs",
                "UnsupportedValue",
                format!(
                    "backendRef {}: a Service backend needs its `port`",
                    backend.name
                ),
            ));
        };
        let Some(service_port) = (service.spec.iter())
            .flat_map(|s| s.ports.iter().flatten())
            .find(|p| p.port == port)
        else {
            return Err(Condition::no(
                "ResolvedRefs",
                "BackendNotFound",
                format!(
                    "backendRef {}: the Service has no port {port}",
                    backend.name
                ),
            ));
        };
        protocol = port_protocol(service_port).unwrap_or(protocol);
        let policy = policies.covering(service_ns, &backend.name, service_port.name.as_deref());
        if covered.is_some_and(|c| c != policy) {
            return Err(Condition::no(
                "ResolvedRefs",
                "UnsupportedValue",
                "the backends of one rule are covered by different BackendTLSPolicies (or some by none): one upstream speaks one way",
            ));
        }
        covered = Some(policy);
        let endpoints = ready_endpoints(
            snapshot,
            service_ns,
            &backend.name,
            service_port.name.as_deref(),
        );
        // The Service's share split among its endpoints (weights are whole
        // numbers: scaled by 1000 so that shares stay close).
        let n = endpoints.len().max(1) as u32;
        for address in endpoints {
            nodes.push(NodeConfig {
                address,
                weight: ((weight as u32) * 1000 / n).max(1),
            });
        }
    }
    let tls = (covered.flatten()).map(|i| (i, policies.states[i].tls.clone()));
    Ok(Backend {
        nodes,
        protocol,
        tls,
    })
}

/// What a Service port's `appProtocol` says its endpoints speak, when it
/// is one the Gateway API names (GEP-1911): `kubernetes.io/h2c` is HTTP/2
/// without TLS; `http` is HTTP/1.1.
fn port_protocol(port: &ServicePort) -> Option<UpstreamProtocol> {
    match port.app_protocol.as_deref()? {
        "kubernetes.io/h2c" => Some(UpstreamProtocol::H2c),
        "http" => Some(UpstreamProtocol::Http1),
        _ => None,
    }
}

/// Whether a ReferenceGrant in `to_ns` lets `from_kind`s of `from_ns`
/// refer to its `to_kind` named `name` (a grant without a name covers
/// every object of the kind).
pub fn granted(
    snapshot: &Snapshot,
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    (snapshot.grants.iter())
        .filter(|g| g.namespace().as_deref() == Some(to_ns))
        .any(|g| {
            let from = (g.spec.from.iter())
                .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_ns);
            let to = (g.spec.to.iter()).any(|t| {
                t.group.is_empty()
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n == name)
            });
            from && to
        })
}

/// `address:port` of every ready endpoint of Service `service`'s port named
/// `port_name`, from all its EndpointSlices.
fn ready_endpoints(
    snapshot: &Snapshot,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Vec<String> {
    let mut found = Vec::new();
    for slice in &snapshot.slices {
        let of_service = slice.namespace().as_deref() == Some(namespace)
            && slice
                .labels()
                .get("kubernetes.io/service-name")
                .map(String::as_str)
                == Some(service);
        if !of_service {
            continue;
        }
        let Some(port) = (slice.ports.iter().flatten())
            .find(|p| p.name.as_deref().unwrap_or("") == port_name.unwrap_or(""))
            .and_then(|p| p.port)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                found.push(if slice.address_type == "IPv6" {
                    format!("[{address}]:{port}")
                } else {
                    format!("{address}:{port}")
                });
            }
        }
    }
    found.sort();
    found.dedup();
    found
}
