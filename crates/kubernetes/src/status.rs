//! Status written back as the Gateway API asks, so that `kubectl get
//! httproute -o yaml` says why a route is or is not served: GatewayClass
//! `Accepted`; Gateway `Accepted` and `Programmed`, each listener's
//! `attachedRoutes`, `supportedKinds` and conditions; each HTTPRoute's and
//! GRPCRoute's `parents` entry for every parent of ours, `Accepted` and `ResolvedRefs` with their reasons;
//! each WasmPlugin's `Accepted` (or why it did not load) and the number of
//! HTTPRoutes it runs on; each BackendTLSPolicy used by a route of ours,
//! one `ancestors` entry per Gateway of those routes.
//! A status is written only when what it says changed (the watch sees the
//! node's own writes too).

use std::collections::HashMap;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use crate::model::{Condition, Translation, GROUP};
use crate::route_view::RouteKind;
use crate::wasmplugin::WasmPlugin;

/// What was last written, per object, without the timestamps.
#[derive(Default)]
pub struct Written {
    last: HashMap<String, Value>,
}

fn conditions(list: &[Condition], generation: Option<i64>, now: &str) -> Value {
    Value::Array(
        list.iter()
            .map(|c| {
                json!({
                    "type": c.kind,
                    "status": if c.ok { "True" } else { "False" },
                    "reason": c.reason,
                    "message": c.message,
                    "observedGeneration": generation.unwrap_or(0),
                    "lastTransitionTime": now,
                })
            })
            .collect(),
    )
}

/// Writes what changed since the last call; errors are logged (the next
/// change writes again).
pub async fn write(
    client: &Client,
    controller: &str,
    translation: &Translation,
    generations: &HashMap<String, Option<i64>>,
    written: &mut Written,
) {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let now = serde_json::to_value(&now).unwrap_or_default();
    let now = now.as_str().unwrap_or_default().to_string();
    for class in &translation.classes {
        let key = format!("gatewayclass/{class}");
        let accepted = [Condition::yes(
            "Accepted",
            "Accepted",
            format!("handled by {controller}"),
        )];
        let gen = generation(generations, &key);
        let body = |time: &str| json!({"conditions": conditions(&accepted, gen, time)});
        let api: Api<GatewayClass> = Api::all(client.clone());
        patch(written, &key, api, class, body, &now).await;
    }
    for ((namespace, name), listeners) in &translation.gateways {
        let key = format!("gateway/{namespace}/{name}");
        let gen = generation(generations, &key);
        let programmed = if listeners.iter().any(|l| l.conditions.iter().all(|c| c.ok)) {
            Condition::yes(
                "Programmed",
                "Programmed",
                "served by every wasmgate node of the class",
            )
        } else {
            Condition::no(
                "Programmed",
                "Invalid",
                "no listener of it is served (see the listeners' conditions)",
            )
        };
        let ok = [
            Condition::yes("Accepted", "Accepted", "accepted by wasmgate"),
            programmed,
        ];
        let body = |time: &str| {
            json!({
                "conditions": conditions(&ok, gen, time),
                "listeners": listeners.iter().map(|l| json!({
                    "name": l.name,
                    "attachedRoutes": l.attached,
                    "supportedKinds": l.kinds.iter()
                        .map(|kind| json!({"group": GROUP, "kind": kind}))
                        .collect::<Vec<_>>(),
                    "conditions": conditions(&l.conditions, gen, time),
                })).collect::<Vec<_>>(),
            })
        };
        let api: Api<Gateway> = Api::namespaced(client.clone(), namespace);
        patch(written, &key, api, name, body, &now).await;
    }
    for ((kind, namespace, name), (gen, parents, others)) in &translation.route_status {
        let key = format!("{}/{namespace}/{name}", kind.name());
        let body = |time: &str| {
            json!({"parents": parents.iter().map(|p| {
                let mut parent_ref = json!({
                    "group": GROUP,
                    "kind": "Gateway",
                    "namespace": p.gateway_namespace,
                    "name": p.gateway,
                });
                if let Some(section) = &p.section_name {
                    parent_ref["sectionName"] = json!(section);
                }
                json!({
                    "parentRef": parent_ref,
                    "controllerName": controller,
                    "conditions": conditions(&p.conditions, *gen, time),
                })
            }).chain(others.iter().cloned()).collect::<Vec<_>>()})
        };
        match kind {
            RouteKind::Http => {
                let api: Api<HttpRoute> = Api::namespaced(client.clone(), namespace);
                patch(written, &key, api, name, body, &now).await;
            }
            RouteKind::Grpc => {
                let api: Api<GrpcRoute> = Api::namespaced(client.clone(), namespace);
                patch(written, &key, api, name, body, &now).await;
            }
        }
    }
    for ((namespace, name), (gen, ancestors, list, others)) in &translation.policy_status {
        let key = format!("backendtlspolicy/{namespace}/{name}");
        let body = |time: &str| {
            json!({"ancestors": ancestors.iter().map(|(gw_namespace, gateway)| json!({
                "ancestorRef": {"group": GROUP, "kind": "Gateway", "namespace": gw_namespace, "name": gateway},
                "controllerName": controller,
                "conditions": conditions(list, *gen, time),
            })).chain(others.iter().cloned()).collect::<Vec<_>>()})
        };
        let api: Api<BackendTlsPolicy> = Api::namespaced(client.clone(), namespace);
        patch(written, &key, api, name, body, &now).await;
    }
    for ((namespace, name), (gen, accepted, attached)) in &translation.plugin_status {
        let key = format!("wasmplugin/{namespace}/{name}");
        let body = |time: &str| {
            json!({
                "conditions": conditions(std::slice::from_ref(accepted), *gen, time),
                "attachedRoutes": attached,
            })
        };
        let api: Api<WasmPlugin> = Api::namespaced(client.clone(), namespace);
        patch(written, &key, api, name, body, &now).await;
    }
}

/// Writes the status `body` makes (for time `now`; compared without one)
/// to object `name` when it differs from what was last written for `key`.
async fn patch<K>(
    written: &mut Written,
    key: &str,
    api: Api<K>,
    name: &str,
    body: impl Fn(&str) -> Value,
    now: &str,
) where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if changed(written, key, &body("")) {
        let patch = json!({"status": body(now)});
        let result = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        report(written, key, result.map(drop));
    }
}

fn generation(generations: &HashMap<String, Option<i64>>, key: &str) -> Option<i64> {
    generations.get(key).copied().flatten()
}

/// Whether `status` differs from what was last written for `key` (and
/// remembers it).
fn changed(written: &mut Written, key: &str, status: &Value) -> bool {
    if written.last.get(key) == Some(status) {
        return false;
    }
    written.last.insert(key.to_string(), status.clone());
    true
}

/// Logs a failed write and forgets it was made, so the next pass retries.
fn report(written: &mut Written, key: &str, result: Result<(), kube::Error>) {
    if let Err(e) = result {
        written.last.remove(key);
        tracing::warn!(object = key, error = %e, "writing the status failed; the next change writes it again");
    }
}
