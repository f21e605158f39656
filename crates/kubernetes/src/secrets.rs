//! Secrets read by name. The node never lists Secrets: each one a Gateway's
//! `certificateRefs`, a WasmPlugin's `imagePullSecret` or the services
//! ConfigMap's `password_secret` names gets a watch of its own, in its own
//! namespace, selected by `metadata.name`. The API server authorizes such
//! a watch against a Role's `resourceNames`, so an operator can grant the
//! node exactly the Secrets it serves (deploy/kubernetes/rbac.yaml) and no
//! other Secret of the cluster is ever sent to it.
//!
//! The watches follow the references: one is started when a resource first
//! names a Secret and stopped when none does any more. A Secret the node
//! may not read is said in the status of whatever names it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

use crate::model::Snapshot;
use crate::watches::Watches;

/// How long a pass waits for newly named Secrets' first answer, so that a
/// listener is not built without the certificate that is on its way.
const FIRST_ANSWER: Duration = Duration::from_secs(5);

/// A Secret's namespace and name.
pub type SecretRef = (String, String);

/// Named Secrets the node cannot read, with why.
pub type Unreadable = BTreeMap<SecretRef, String>;

/// No Secret unreadable (for translations made without watches).
#[cfg(test)]
pub static NONE_UNREADABLE: Unreadable = BTreeMap::new();

/// The Secrets the node watches, by reference.
pub struct NamedSecrets {
    client: Client,
    watches: Mutex<BTreeMap<SecretRef, Watch>>,
    /// Each watch's health, with the node's other watches.
    health: Arc<Watches>,
}

struct Watch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::AbortHandle,
}

/// What a watch knows of its Secret.
#[derive(Default)]
struct Seen {
    secret: Option<Secret>,
    /// Objects of a list in progress (the watch's Init..InitDone).
    listing: Option<Option<Secret>>,
    /// Why the Secret cannot be read, while it cannot.
    problem: Option<String>,
    /// Whether the API server has answered at least once.
    answered: bool,
}

impl NamedSecrets {
    pub fn new(client: Client, health: Arc<Watches>) -> NamedSecrets {
        NamedSecrets {
            client,
            watches: Mutex::new(BTreeMap::new()),
            health,
        }
    }

    /// Watches exactly `wanted`, waiting (a bounded while) for the first
    /// answer about each Secret that is new; `notify` is woken by every
    /// change a watch sees.
    pub async fn follow(&self, wanted: Vec<SecretRef>, notify: &'static tokio::sync::Notify) {
        let started: Vec<Arc<Mutex<Seen>>> = {
            let mut watches = self.watches.lock().expect("watches");
            watches.retain(|r, w| {
                let keep = wanted.contains(r);
                if !keep {
                    w.task.abort();
                    self.health.forget(&watch_name(r));
                }
                keep
            });
            (wanted.into_iter())
                .filter_map(|r| {
                    if watches.contains_key(&r) {
                        return None;
                    }
                    let watch = self.start(&r, notify);
                    let seen = watch.seen.clone();
                    watches.insert(r, watch);
                    Some(seen)
                })
                .collect()
        };
        let deadline = Instant::now() + FIRST_ANSWER;
        while Instant::now() < deadline && !started.iter().all(|s| s.lock().expect("seen").answered)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn start(&self, r: &SecretRef, notify: &'static tokio::sync::Notify) -> Watch {
        let (namespace, name) = r;
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher::watcher(api, config);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (at, state, health) = (watch_name(r), seen.clone(), self.health.clone());
        let task = tokio::spawn(async move {
            health
                .drive(&at, stream, |event| {
                    let mut seen = state.lock().expect("seen");
                    seen.answered = true;
                    match event {
                        Ok(event) => {
                            if seen.problem.take().is_some() {
                                tracing::info!(secret = %at, "the Secret can be read again");
                            }
                            seen.apply(event);
                        }
                        Err(e) => {
                            let why = unreadable(e);
                            if seen.problem.as_deref() != Some(why.as_str()) {
                                tracing::warn!(secret = %at, "the Secret cannot be read: {why}");
                            }
                            seen.problem = Some(why);
                        }
                    }
                    drop(seen);
                    notify.notify_one();
                })
                .await
        });
        Watch {
            seen,
            task: task.abort_handle(),
        }
    }

    /// Puts what the watches know into `snapshot`: the Secrets by the type
    /// each consumer reads, and why any cannot be read.
    pub fn fill(&self, snapshot: &mut Snapshot) {
        let watches = self.watches.lock().expect("watches");
        for (r, watch) in watches.iter() {
            let seen = watch.seen.lock().expect("seen");
            if let Some(why) = &seen.problem {
                snapshot.unreadable_secrets.insert(r.clone(), why.clone());
            }
            let Some(secret) = seen.secret.clone() else {
                continue;
            };
            match secret.type_.as_deref() {
                Some("kubernetes.io/tls") => snapshot.secrets.push(secret.clone()),
                Some(crate::pull_secrets::DOCKER_CONFIG_JSON) => {
                    snapshot.pull_secrets.push(secret.clone())
                }
                _ => {}
            }
            // A service's password may be in a Secret of any type.
            snapshot.service_secrets.push(secret);
        }
    }

    /// The watched Secrets and why any cannot be read, for `/status`.
    pub fn describe(&self) -> serde_json::Value {
        let watches = self.watches.lock().expect("watches");
        let mut unreadable = serde_json::Map::new();
        for ((namespace, name), watch) in watches.iter() {
            if let Some(why) = &watch.seen.lock().expect("seen").problem {
                unreadable.insert(format!("{namespace}/{name}"), why.clone().into());
            }
        }
        serde_json::json!({"watched": watches.len(), "unreadable": unreadable})
    }
}

impl Drop for NamedSecrets {
    fn drop(&mut self) {
        for watch in self.watches.lock().expect("watches").values() {
            watch.task.abort();
        }
    }
}

/// A Secret's watch's name among the node's watches.
fn watch_name((namespace, name): &SecretRef) -> String {
    format!("Secret {namespace}/{name}")
}

impl Seen {
    fn apply(&mut self, event: Event<Secret>) {
        match event {
            Event::Init => self.listing = Some(None),
            Event::InitApply(secret) => self.listing = Some(Some(secret)),
            Event::InitDone => self.secret = self.listing.take().flatten(),
            Event::Apply(secret) => self.secret = Some(secret),
            Event::Delete(_) => self.secret = None,
        }
    }
}

/// Why a watch failed, as an operator can act on it.
fn unreadable(e: &watcher::Error) -> String {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(api))
        | watcher::Error::WatchStartFailed(kube::Error::Api(api))
        | watcher::Error::WatchFailed(kube::Error::Api(api)) => Some(api),
        watcher::Error::WatchError(status) => Some(status),
        _ => None,
    };
    match api {
        Some(api) if api.code == 403 => format!(
            "the node may not read it (RBAC: grant it by name in a Role of its namespace, as deploy/kubernetes/rbac.yaml shows): {}",
            api.message
        ),
        _ => format!("{e}"),
    }
}

/// Why Secret `namespace/name` is not among those read: the node may not
/// read it, or there is no such Secret of type `kind`.
pub fn missing(unreadable: &Unreadable, namespace: &str, name: &str, kind: &str) -> String {
    match unreadable.get(&(namespace.to_string(), name.to_string())) {
        Some(why) => format!("Secret `{namespace}/{name}` cannot be read: {why}"),
        None => format!("no Secret `{namespace}/{name}` of type {kind}"),
    }
}

/// The Secrets the node's resources name: HTTPS listeners' certificates
/// of Gateways of this controller (in another namespace only when a
/// ReferenceGrant permits it), WasmPlugins' pull Secrets, the services
/// ConfigMap's passwords.
pub fn named(
    snapshot: &Snapshot,
    controller: &str,
    services: Option<&(String, String)>,
) -> Vec<SecretRef> {
    let ours: Vec<String> = (snapshot.classes.iter())
        .filter(|c| c.spec.controller_name == controller)
        .map(|c| c.name_any())
        .collect();
    let mut out = Vec::new();
    for gateway in &snapshot.gateways {
        if !ours.contains(&gateway.spec.gateway_class_name) {
            continue;
        }
        let namespace = gateway.namespace().unwrap_or_default();
        let refs = (gateway.spec.listeners.iter())
            .filter_map(|l| l.tls.as_ref()?.certificate_refs.as_ref())
            .flatten();
        for r in refs {
            let (group, kind) = (
                r.group.as_deref().unwrap_or(""),
                r.kind.as_deref().unwrap_or("Secret"),
            );
            if !group.is_empty() || kind != "Secret" {
                continue;
            }
            let secret_ns = r.namespace.clone().unwrap_or_else(|| namespace.clone());
            if secret_ns == namespace
                || crate::backends::granted(
                    snapshot, "Gateway", &namespace, "Secret", &secret_ns, &r.name,
                )
            {
                out.push((secret_ns, r.name.clone()));
            }
        }
    }
    for plugin in &snapshot.wasmplugins {
        if let Some(name) = &plugin.spec.image_pull_secret {
            out.push((plugin.namespace().unwrap_or_default(), name.clone()));
        }
    }
    if let Some((namespace, name)) = services {
        for secret in crate::services::password_secrets((namespace, name), &snapshot.config_maps) {
            out.push((namespace.clone(), secret));
        }
    }
    out.sort();
    out.dedup();
    out
}
