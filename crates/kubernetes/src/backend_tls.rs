//! BackendTLSPolicy: TLS from the gateway to a Service's endpoints. A
//! policy names Services (a port by its name in `sectionName`, else every
//! port) and how their certificates are verified: the CAs of ConfigMaps'
//! `ca.crt` in its namespace, or the well-known roots (`System`), the name
//! sent as SNI and verified being `hostname`. A rule whose backends a
//! policy covers speaks TLS to them (HTTP/1.1, or HTTP/2 by ALPN where it
//! would speak h2c); a policy whose CAs cannot be used fails those rules
//! with 500 rather than falling back to plain text, as the Gateway API
//! asks.
//!
//! Precedence between policies of one target: the older, then by
//! `namespace/name`; the others are `Accepted=False`, `Conflicted`.

use std::collections::BTreeMap;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use kube::ResourceExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use wasmgate_config::UpstreamTls;

use crate::model::{Condition, Snapshot};

/// A policy as this node reads it.
pub struct PolicyState {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    /// `Accepted` and `ResolvedRefs`.
    pub conditions: Vec<Condition>,
    /// What its Services' upstreams get; Err: why they cannot be reached.
    pub tls: Result<UpstreamTls, String>,
    /// Other controllers' `status.ancestors` entries, kept as written.
    pub others: Vec<serde_json::Value>,
}

/// Every policy, and which one each target (namespace, Service, port name
/// or None for every port) takes.
pub struct TlsPolicies {
    pub states: Vec<PolicyState>,
    targets: BTreeMap<(String, String, Option<String>), usize>,
    /// The policies that lost a target to another (by the winner's index):
    /// their `Conflicted` is said wherever the winner is used.
    rivals: BTreeMap<usize, Vec<usize>>,
}

impl TlsPolicies {
    pub fn new(snapshot: &Snapshot, controller: &str) -> TlsPolicies {
        let mut policies: Vec<&BackendTlsPolicy> = snapshot.tls_policies.iter().collect();
        policies.sort_by_key(|p| {
            let created = (p.metadata.creation_timestamp.as_ref()).map_or(0, |t| t.0.as_second());
            (created, p.namespace().unwrap_or_default(), p.name_any())
        });
        let mut out = TlsPolicies {
            states: Vec::new(),
            targets: BTreeMap::new(),
            rivals: BTreeMap::new(),
        };
        for policy in policies {
            let namespace = policy.namespace().unwrap_or_default();
            let mut conflicted = true;
            let mut missing = Vec::new();
            for t in &policy.spec.target_refs {
                if !t.group.is_empty() || t.kind != "Service" {
                    missing.push(format!("{}/{} {}: only Services", t.group, t.kind, t.name));
                    continue;
                }
                if !service_has(snapshot, &namespace, &t.name, t.section_name.as_deref()) {
                    missing.push(format!(
                        "Service `{namespace}/{}`{}",
                        t.name,
                        (t.section_name.as_ref()).map_or(String::new(), |s| format!(" port `{s}`"))
                    ));
                    continue;
                }
                let key = (namespace.clone(), t.name.clone(), t.section_name.clone());
                match out.targets.get(&key) {
                    Some(winner) => (out.rivals.entry(*winner).or_default()).push(out.states.len()),
                    None => {
                        out.targets.insert(key, out.states.len());
                        conflicted = false;
                    }
                }
            }
            let (resolved, tls) = validation(policy, &namespace, snapshot);
            let accepted = if !missing.is_empty() {
                Condition::no(
                    "Accepted",
                    "TargetNotFound",
                    format!("not found: {}", missing.join(", ")),
                )
            } else if conflicted {
                Condition::no(
                    "Accepted",
                    "Conflicted",
                    "an older policy (or one first by namespace/name) targets the same Services",
                )
            } else if let Err(why) = &tls {
                Condition::no("Accepted", "NoValidCACertificate", why.clone())
            } else if (policy.spec.validation.subject_alt_names.as_ref())
                .is_some_and(|s| !s.is_empty())
            {
                Condition::no(
                    "Accepted",
                    "Invalid",
                    "validation.subjectAltNames is not supported by wasmgate yet (the certificate is verified for `hostname`)",
                )
            } else {
                Condition::yes("Accepted", "Accepted", "applied by wasmgate")
            };
            let tls = match (&accepted.ok, tls) {
                (false, Ok(_)) => Err(accepted.message.clone()),
                (_, tls) => tls,
            };
            out.states.push(PolicyState {
                namespace,
                name: policy.name_any(),
                generation: policy.metadata.generation,
                conditions: vec![accepted, resolved],
                tls,
                others: (policy.status.iter())
                    .flat_map(|s| s.ancestors.iter())
                    .filter(|a| a.controller_name != controller)
                    .filter_map(|a| serde_json::to_value(a).ok())
                    .collect(),
            });
        }
        out
    }

    /// The policies that lost a target to policy `winner`.
    pub fn rivals(&self, winner: usize) -> &[usize] {
        self.rivals.get(&winner).map_or(&[], Vec::as_slice)
    }

    /// The policy (its index in `states`) that covers port `port_name` of
    /// Service `namespace/service`, if one does.
    pub fn covering(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Option<usize> {
        let key = |section: Option<&str>| {
            (
                namespace.to_string(),
                service.to_string(),
                section.map(str::to_string),
            )
        };
        (port_name.and_then(|p| self.targets.get(&key(Some(p)))))
            .or_else(|| self.targets.get(&key(None)))
            .copied()
    }
}

/// Whether Service `name` exists (with a port named `section`, if given).
fn service_has(snapshot: &Snapshot, namespace: &str, name: &str, section: Option<&str>) -> bool {
    (snapshot.services.iter())
        .filter(|s| s.namespace().as_deref() == Some(namespace) && s.name_any() == name)
        .any(|s| {
            section.is_none_or(|section| {
                (s.spec.iter().flat_map(|spec| spec.ports.iter().flatten()))
                    .any(|p| p.name.as_deref() == Some(section))
            })
        })
}

/// The `ResolvedRefs` condition and the TLS of a policy's validation (Err:
/// why its CAs cannot be used).
fn validation(
    policy: &BackendTlsPolicy,
    namespace: &str,
    snapshot: &Snapshot,
) -> (Condition, Result<UpstreamTls, String>) {
    let v = &policy.spec.validation;
    let refs = v.ca_certificate_refs.clone().unwrap_or_default();
    let mut tls = UpstreamTls {
        sni: Some(v.hostname.clone()),
        ca_file: None,
        ca_pem: None,
        verify: true,
        client_cert: None,
        client_key: None,
    };
    if refs.is_empty() {
        return match v.well_known_ca_certificates.as_deref() {
            Some("System") => (resolved(), Ok(tls)),
            other => {
                let why = format!("validation: no caCertificateRefs, and wellKnownCACertificates is {other:?} (wasmgate knows `System`)");
                (
                    Condition::no("ResolvedRefs", "InvalidKind", why.clone()),
                    Err(why),
                )
            }
        };
    }
    let mut pem = String::new();
    for (i, r) in refs.iter().enumerate() {
        if !r.group.is_empty() || r.kind != "ConfigMap" {
            let why = format!(
                "caCertificateRefs[{i}]: {}/{} is not a kind wasmgate reads CAs from (ConfigMap)",
                r.group, r.kind
            );
            return (
                Condition::no("ResolvedRefs", "InvalidKind", why.clone()),
                Err(why),
            );
        }
        let found = (snapshot.config_maps.iter())
            .find(|c| c.namespace().as_deref() == Some(namespace) && c.name_any() == r.name)
            .and_then(|c| c.data.as_ref()?.get("ca.crt").cloned());
        let usable = found.filter(|text| {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(text.as_bytes()).collect();
            !certs.is_empty() && certs.iter().all(Result::is_ok)
        });
        let Some(text) = usable else {
            let why = format!(
                "caCertificateRefs[{i}]: ConfigMap `{namespace}/{}` is missing or has no PEM certificates under `ca.crt`",
                r.name
            );
            return (
                Condition::no("ResolvedRefs", "InvalidCACertificateRef", why.clone()),
                Err(why),
            );
        };
        pem.push_str(&text);
        pem.push('\n');
    }
    tls.ca_pem = Some(pem);
    (resolved(), Ok(tls))
}

fn resolved() -> Condition {
    Condition::yes("ResolvedRefs", "ResolvedRefs", "every reference resolved")
}
