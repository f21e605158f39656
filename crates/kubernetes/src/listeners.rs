//! A Gateway's listeners as this node serves them: `HTTP` on its plain
//! listeners, `HTTPS` (TLS terminated here) on its TLS listeners with the
//! certificates of the listener's Secrets, and each listener's conditions
//! and route kinds. Other protocols (TLS passthrough, TCP, UDP) are
//! refused in the listener's status.
//!
//! The node's sockets are its own file's (`listen`, `listeners`): a Gateway
//! listener chooses which of them its routes answer on by its protocol (a
//! route attached only to HTTPS listeners is served only over TLS), and its
//! certificates become the node's `certificates`, chosen per handshake by
//! SNI (the listener's `hostname`, else the certificate's own names).

use std::collections::BTreeMap;
use std::path::Path;

use gateway_api::gateways::{Gateway, GatewayListeners, GatewayListenersTlsMode};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use wasmgate_config::{CertificateConfig, Scheme};

use crate::backends::granted;
use crate::model::{Condition, Snapshot, GROUP};
use crate::names::entry_name;
use crate::route_view::RouteKind;

/// One listener of a Gateway of ours.
pub struct ListenerState<'a> {
    pub spec: &'a GatewayListeners,
    /// How its routes are reached; None when this node does not serve it.
    pub scheme: Option<Scheme>,
    /// The node's local port it is served on (`kubernetes.ports`); None:
    /// every node listener of its scheme.
    pub node_port: Option<u16>,
    /// The route kinds it takes (its `allowedRoutes.kinds` that are served).
    pub kinds: Vec<RouteKind>,
    pub conditions: Vec<Condition>,
}

impl ListenerState<'_> {
    pub fn takes(&self, kind: RouteKind) -> bool {
        self.scheme.is_some() && self.kinds.contains(&kind)
    }
}

/// The listeners of `gateway`, and the certificates they serve (pushed
/// onto `certificates`, named after the Gateway and listener).
pub fn listeners<'a>(
    gateway: &'a Gateway,
    snapshot: &Snapshot,
    ports: &BTreeMap<u16, (u16, Scheme)>,
    certificates: &mut Vec<CertificateConfig>,
) -> Vec<ListenerState<'a>> {
    let namespace = gateway.namespace().unwrap_or_default();
    (gateway.spec.listeners.iter())
        .map(|spec| {
            let scheme = match spec.protocol.as_str() {
                "HTTP" => Some(Scheme::Http),
                "HTTPS" => Some(Scheme::Https),
                _ => None,
            };
            let (kinds, kinds_ok) = route_kinds(spec);
            let mut state = ListenerState {
                spec,
                scheme,
                node_port: None,
                kinds,
                conditions: Vec::new(),
            };
            let port = u16::try_from(spec.port).unwrap_or(0);
            let mapped = ports.get(&port);
            let accepted = match scheme {
                None => Condition::no(
                    "Accepted",
                    "UnsupportedProtocol",
                    format!(
                        "protocol {} is not served by wasmgate (HTTP and HTTPS are)",
                        spec.protocol
                    ),
                ),
                Some(Scheme::Https) if passthrough(spec) => Condition::no(
                    "Accepted",
                    "UnsupportedValue",
                    "an HTTPS listener terminates TLS: tls.mode Passthrough is for TLS listeners, which wasmgate does not serve",
                ),
                Some(_) if !ports.is_empty() && mapped.is_none() => Condition::no(
                    "Accepted",
                    "PortUnavailable",
                    format!(
                        "port {port} is not one this node serves (its kubernetes.ports map {})",
                        ports.keys().map(u16::to_string).collect::<Vec<_>>().join(", ")
                    ),
                ),
                Some(wanted) if mapped.is_some_and(|(_, s)| *s != wanted) => Condition::no(
                    "Accepted",
                    "PortUnavailable",
                    format!(
                        "port {port} maps to the node's {} listener on port {}, not an {} one",
                        scheme_name(mapped.expect("mapped").1),
                        mapped.expect("mapped").0,
                        scheme_name(wanted)
                    ),
                ),
                Some(_) => Condition::yes("Accepted", "Accepted", "served by wasmgate"),
            };
            state.node_port = mapped.map(|(local, _)| *local);
            if !accepted.ok {
                // Routes do not attach to a listener this node does not serve.
                state.scheme = None;
            }
            let mut resolved = if kinds_ok {
                Condition::yes("ResolvedRefs", "ResolvedRefs", "every reference resolved")
            } else {
                Condition::no(
                    "ResolvedRefs",
                    "InvalidRouteKinds",
                    "allowedRoutes.kinds names a kind wasmgate does not serve (HTTPRoute and GRPCRoute are)",
                )
            };
            if accepted.ok && scheme == Some(Scheme::Https) {
                match certificate(&namespace, &gateway.name_any(), spec, snapshot) {
                    Ok(found) => certificates.extend(found),
                    Err(problem) => resolved = problem,
                }
            }
            let programmed = if accepted.ok && resolved.ok {
                Condition::yes("Programmed", "Programmed", "served by wasmgate")
            } else {
                Condition::no("Programmed", "Invalid", accepted_or(&resolved, &accepted))
            };
            state.conditions = vec![accepted, programmed, resolved];
            state
        })
        .collect()
}

fn scheme_name(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Http => "HTTP",
        Scheme::Https => "HTTPS",
    }
}

fn passthrough(spec: &GatewayListeners) -> bool {
    (spec.tls.as_ref()).and_then(|t| t.mode.clone()) == Some(GatewayListenersTlsMode::Passthrough)
}

fn accepted_or(resolved: &Condition, accepted: &Condition) -> String {
    if accepted.ok {
        resolved.message.clone()
    } else {
        accepted.message.clone()
    }
}

/// The kinds a listener takes, and whether every kind it names is served.
fn route_kinds(spec: &GatewayListeners) -> (Vec<RouteKind>, bool) {
    let all = vec![RouteKind::Http, RouteKind::Grpc];
    let Some(named) = (spec.allowed_routes.as_ref()).and_then(|a| a.kinds.as_ref()) else {
        return (all, true);
    };
    let mut kinds = Vec::new();
    let mut ok = true;
    for k in named {
        let found = (k.group.as_deref().unwrap_or(GROUP) == GROUP)
            .then(|| all.iter().find(|kind| kind.name() == k.kind))
            .flatten();
        match found {
            Some(kind) => kinds.push(*kind),
            None => ok = false,
        }
    }
    (kinds, ok)
}

/// The certificates of an HTTPS listener's `certificateRefs` (Secrets of
/// type kubernetes.io/tls, in the Gateway's namespace or one whose
/// ReferenceGrant allows it), each checked as the gateway will load it;
/// or the ResolvedRefs condition that says which is wrong.
fn certificate(
    namespace: &str,
    gateway: &str,
    spec: &GatewayListeners,
    snapshot: &Snapshot,
) -> Result<Vec<CertificateConfig>, Condition> {
    let invalid = |message: String| Condition::no("ResolvedRefs", "InvalidCertificateRef", message);
    let refs = (spec.tls.as_ref())
        .and_then(|t| t.certificate_refs.as_ref())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| invalid("an HTTPS listener needs tls.certificateRefs".into()))?;
    let mut out = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        let group = r.group.as_deref().unwrap_or("");
        let kind = r.kind.as_deref().unwrap_or("Secret");
        if !group.is_empty() || kind != "Secret" {
            return Err(invalid(format!(
                "certificateRefs[{i}]: only Secrets are supported, not {group}/{kind}"
            )));
        }
        let secret_ns = r.namespace.as_deref().unwrap_or(namespace);
        if secret_ns != namespace
            && !granted(snapshot, "Gateway", namespace, "Secret", secret_ns, &r.name)
        {
            return Err(Condition::no(
                "ResolvedRefs",
                "RefNotPermitted",
                format!("certificateRefs[{i}]: Secret `{secret_ns}/{}` needs a ReferenceGrant in namespace `{secret_ns}` from Gateways of namespace `{namespace}`", r.name),
            ));
        }
        let secret = (snapshot.secrets.iter())
            .find(|s| s.name_any() == r.name && s.namespace().as_deref() == Some(secret_ns))
            .ok_or_else(|| {
                invalid(format!(
                    "certificateRefs[{i}]: {}",
                    snapshot.missing_secret(secret_ns, &r.name, "kubernetes.io/tls")
                ))
            })?;
        let config = certificate_config(
            entry_name(&format!("{namespace}.{gateway}.{}.{i}", spec.name)),
            secret,
            spec.hostname.as_deref(),
        )
        .map_err(|why| {
            invalid(format!(
                "certificateRefs[{i}]: Secret `{secret_ns}/{}`: {why}",
                r.name
            ))
        })?;
        out.push(config);
    }
    Ok(out)
}

/// A TLS Secret's `tls.crt` and `tls.key` as a certificate, served for
/// the listener's hostname (or the names in the certificate), loaded once
/// here so that a broken Secret is said in the listener's status instead
/// of failing the node's whole configuration.
fn certificate_config(
    name: String,
    secret: &Secret,
    hostname: Option<&str>,
) -> Result<CertificateConfig, String> {
    let text = |key: &str| -> Result<String, String> {
        let bytes = (secret.data.as_ref())
            .and_then(|d| d.get(key))
            .ok_or_else(|| format!("no `{key}` in it"))?;
        String::from_utf8(bytes.0.clone()).map_err(|_| format!("`{key}` is not PEM text"))
    };
    let config = CertificateConfig {
        name,
        cert: None,
        key: None,
        cert_pem: Some(text("tls.crt")?),
        key_pem: Some(text("tls.key")?),
        snis: hostname.map(|h| vec![h.to_string()]).unwrap_or_default(),
    };
    wasmgate_transport::tls::load_certificates(std::slice::from_ref(&config), Path::new("/"))
        .map_err(|(_, why)| {
            why.replace("`cert_pem`", "tls.crt")
                .replace("`key_pem`", "tls.key")
        })?;
    Ok(config)
}
