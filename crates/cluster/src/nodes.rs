//! The cluster's node registry: every node keeps a key
//! `<prefix>/nodes/<node>` under a lease (10 s, kept alive every 3 s), with
//! its address, version, the configuration revision and generation it
//! serves, since when, whether it is healthy and its last error. A node
//! that stops cleanly revokes its lease, so it leaves the list at once; one
//! that crashes or loses etcd disappears when its lease expires. `GET
//! /cluster` on any node lists them all, with which nodes are behind (serve
//! an older configuration revision than another node).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, PutOptions};
use serde_json::{json, Value};

use wasmgate_base::backoff::Backoff;

use crate::layout;
use crate::store::{EtcdStore, BACKOFF_MAX, BACKOFF_MIN};

const LEASE_TTL_SECS: i64 = 10;
const KEEPALIVE: Duration = Duration::from_secs(3);

/// What this node says about itself.
fn registration(store: &EtcdStore) -> Option<Value> {
    let live = store.live.upgrade()?;
    let gateway = live.current();
    let config = gateway.config();
    let state = store.state.lock().expect("store state");
    let status = live.status();
    Some(json!({
        "node": store.node,
        "listen": config.all_listeners().iter().map(|l| &l.address).collect::<Vec<_>>(),
        "admin": config.admin,
        "version": env!("CARGO_PKG_VERSION"),
        "revision": state.applied,
        "generation": status.generation,
        "started_at_ms": state.started_at_ms,
        "updated_at_ms": wasmgate_base::unix_ms(),
        "ready": live.is_ready(),
        "healthy": live.is_ready() && state.last_error.is_none(),
        "last_error": state.last_error,
    }))
}

/// Registers the node and keeps its registration current, for as long as
/// the node lives; a lost etcd or lease is registered again with backoff.
pub async fn register(store: Arc<EtcdStore>) {
    let key = format!("{}{}", layout::nodes_prefix(&store.prefix), store.node);
    let mut backoff = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
    loop {
        if store.live.upgrade().is_none() || store.state.lock().expect("store state").leaving {
            return;
        }
        match keep_registered(&store, &key).await {
            Ok(()) => return,
            Err(e) => {
                tracing::debug!(node = %store.node, error = %e, "node registration lost; registering again");
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// At a clean stop: no more registering, and the lease revoked so the
/// registration goes at once (bounded: a stop never waits long for etcd).
pub(crate) async fn leave(store: &EtcdStore) {
    let lease = {
        let mut state = store.state.lock().expect("store state");
        state.leaving = true;
        state.lease.take()
    };
    let Some(lease) = lease else { return };
    let revoke = async {
        let mut client = store.client().await?;
        client.lease_revoke(lease).await?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(2), revoke).await {
        Ok(Ok(())) => tracing::info!(node = %store.node, "left the cluster"),
        Ok(Err(e)) => {
            tracing::warn!(node = %store.node, error = %e, "could not revoke the node's lease; it leaves the cluster view when the lease expires")
        }
        Err(_) => {
            tracing::warn!(node = %store.node, "etcd did not answer in time; the node leaves the cluster view when its lease expires")
        }
    }
}

async fn keep_registered(store: &EtcdStore, key: &str) -> anyhow::Result<()> {
    let mut client = store.client().await?;
    let lease = client.lease_grant(LEASE_TTL_SECS, None).await?.id();
    let leaving = {
        let mut state = store.state.lock().expect("store state");
        if !state.leaving {
            state.lease = Some(lease);
        }
        state.leaving
    };
    if leaving {
        let _ = client.lease_revoke(lease).await;
        return Ok(());
    }
    let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
    // What was last written, without its timestamp: the key is written again
    // only when something in it changed (each write is an etcd revision).
    let mut written: Option<Value> = None;
    loop {
        let Some(mut value) = registration(store) else {
            let _ = client.lease_revoke(lease).await;
            return Ok(());
        };
        if store.state.lock().expect("store state").leaving {
            return Ok(());
        }
        let mut compared = value.clone();
        compared["updated_at_ms"] = Value::Null;
        if written.as_ref() != Some(&compared) {
            value["updated_at_ms"] = json!(wasmgate_base::unix_ms());
            client
                .put(
                    key,
                    serde_json::to_vec(&value)?,
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await?;
            written = Some(compared);
        }
        keeper.keep_alive().await?;
        match answers.message().await? {
            Some(answer) if answer.ttl() > 0 => {}
            _ => anyhow::bail!("the lease expired"),
        }
        // Report a change (a new revision served, a rejected one) at once.
        tokio::select! {
            _ = tokio::time::sleep(KEEPALIVE) => {}
            _ = store.changed.notified() => {}
        }
    }
}

/// `GET /cluster`: every registered node, the newest revision any serves,
/// and which are behind it.
pub(crate) async fn cluster_view(store: &EtcdStore) -> Value {
    let this = registration(store).unwrap_or(Value::Null);
    let listed = async {
        let mut client = store.client().await?;
        let response = client
            .get(
                layout::nodes_prefix(&store.prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        let nodes: Vec<Value> = response
            .kvs()
            .iter()
            .filter_map(|kv| serde_json::from_slice(kv.value()).ok())
            .collect();
        anyhow::Ok((revision, nodes))
    };
    match listed.await {
        Ok((etcd_revision, mut nodes)) => {
            let newest = nodes
                .iter()
                .filter_map(|n| n["revision"].as_i64())
                .max()
                .unwrap_or(0);
            for node in &mut nodes {
                let behind = node["revision"].as_i64().is_some_and(|r| r < newest);
                node["behind"] = json!(behind);
            }
            json!({
                "this_node": store.node,
                "etcd": store.endpoints,
                "etcd_revision": etcd_revision,
                "newest_revision": newest,
                "nodes": nodes,
            })
        }
        Err(e) => json!({
            "this_node": store.node,
            "etcd": store.endpoints,
            "error": format!("etcd is unreachable: {e:#}; only this node is known"),
            "nodes": [this],
        }),
    }
}
