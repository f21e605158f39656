//! Which replica writes statuses. Every replica serves the same routes
//! (each follows the API server itself), but only the holder of a
//! `coordination.k8s.io` Lease writes status, so replicas do not overwrite
//! each other's timestamps in a loop. The Lease is kept by
//! `kube-lease-manager`; a replica that stops releases it, and a replica
//! that dies loses it after its duration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::{oneshot, Notify};
use wasmgate_config::KubernetesSource;

/// Seconds a holder that stopped renewing keeps the Lease.
const LEASE_SECONDS: u64 = 15;
/// Seconds before the end that the holder renews.
const GRACE_SECONDS: u64 = 5;

pub struct Leader {
    shared: Arc<Shared>,
    stop: Mutex<Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>>,
}

#[derive(Default)]
struct Shared {
    holds: AtomicBool,
    /// Set when this replica took the Lease: it writes every status once,
    /// whatever it remembers writing before.
    new_term: AtomicBool,
}

impl Leader {
    /// Starts competing for the Lease of `source`'s controller; `wake` is
    /// notified whenever this replica gains or loses it.
    pub fn start(source: &KubernetesSource, client: Client, wake: &'static Notify) -> Leader {
        let shared = Arc::new(Shared::default());
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(compete(
            client,
            lease_name(&source.controller_name),
            lease_namespace(source),
            identity(),
            shared.clone(),
            wake,
            stop_rx,
        ));
        Leader {
            shared,
            stop: Mutex::new(Some((stop_tx, task))),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.shared.holds.load(Ordering::Acquire)
    }

    /// Whether this replica took the Lease since the last call.
    pub fn take_new_term(&self) -> bool {
        self.shared.new_term.swap(false, Ordering::AcqRel)
    }

    /// Gives the Lease up (a stopping node), so another replica takes it at
    /// once rather than after it expires.
    pub async fn release(&self) {
        let stop = self.stop.lock().expect("leader lock").take();
        if let Some((stop, task)) = stop {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
        self.shared.holds.store(false, Ordering::Release);
    }
}

async fn compete(
    client: Client,
    name: String,
    namespace: String,
    identity: String,
    shared: Arc<Shared>,
    wake: &'static Notify,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), &name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_duration(LEASE_SECONDS)
            .with_grace(GRACE_SECONDS)
            .build()
            .await;
        let manager = match built {
            Ok(manager) => manager,
            Err(e) => {
                tracing::warn!(lease = %format!("{namespace}/{name}"), error = %e, "cannot reach the status writers' Lease; retrying");
                tokio::select! {
                    _ = &mut stop => return,
                    () = tokio::time::sleep(Duration::from_secs(5)) => continue,
                }
            }
        };
        let (mut holds, task) = manager.watch().await;
        loop {
            tokio::select! {
                _ = &mut stop => {
                    // Dropping the receiver makes the manager release the
                    // Lease and end.
                    drop(holds);
                    let _ = task.await;
                    return;
                }
                changed = holds.changed() => {
                    if changed.is_err() {
                        break; // the manager ended: build another
                    }
                    let now = *holds.borrow_and_update();
                    let before = shared.holds.swap(now, Ordering::AcqRel);
                    if now && !before {
                        shared.new_term.store(true, Ordering::Release);
                        tracing::info!(lease = %format!("{namespace}/{name}"), %identity, "this replica writes the statuses now");
                    }
                    wake.notify_one();
                }
            }
        }
        shared.holds.store(false, Ordering::Release);
    }
}

/// `wasmgate-` and the controller name as a DNS label.
fn lease_name(controller: &str) -> String {
    let label: String = controller
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let mut name = format!("wasmgate-{label}");
    name.truncate(63);
    name.trim_end_matches('-').to_string()
}

fn lease_namespace(source: &KubernetesSource) -> String {
    source
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The pod's name (or the host's) and the process id: unique among the
/// replicas, readable in `kubectl get lease`.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "wasmgate".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lease_names_are_dns_labels() {
        assert_eq!(
            super::lease_name("wasmgate.io/gateway-controller"),
            "wasmgate-wasmgate-io-gateway-controller"
        );
        assert!(super::lease_name(&"x".repeat(100)).len() <= 63);
    }
}
