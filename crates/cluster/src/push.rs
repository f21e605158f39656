//! `wasmgate config push`: publishes a file's routes, upstreams, plugins,
//! services and global plugins to etcd, replacing what was there (objects
//! the file no longer has are deleted), routes numbered in file order.
//! Every node watching the prefix applies it. One transaction when it fits
//! in etcd's limit of operations per transaction (128 by default), so nodes
//! see all of it at once; larger configurations are written in batches.

use anyhow::{Context, Result};
use etcd_client::{GetOptions, Txn, TxnOp};
use wasmgate_config::GatewayConfig;

use crate::access::EtcdAccess;
use crate::{layout, seal};

/// Operations per transaction (etcd's default `--max-txn-ops` is 128).
const MAX_TXN_OPS: usize = 128;

/// What a push did.
pub struct Pushed {
    pub written: usize,
    pub deleted: usize,
    pub revision: i64,
    pub transactions: usize,
}

/// Writes `config` under `prefix`, each object sealed when `etcd` has keys.
pub async fn push(config: &GatewayConfig, etcd: &EtcdAccess, prefix: &str) -> Result<Pushed> {
    let prefix = prefix.trim_end_matches('/');
    let mut client = etcd
        .connect(
            std::time::Duration::from_secs(3),
            std::time::Duration::from_secs(10),
        )
        .await?;
    let existing = client
        .get(
            format!("{prefix}/"),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .context("reading what is there")?;
    let wanted = layout::all_objects(prefix, config);
    let mut ops: Vec<TxnOp> = existing
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .filter(|key| layout::is_config_key(prefix, key) && !wanted.contains_key(key))
        .map(|key| TxnOp::delete(key, None))
        .collect();
    let deleted = ops.len();
    let written = wanted.len();
    ops.extend(wanted.into_iter().map(|(key, value)| {
        let value = seal::stored(etcd.keyring.as_ref(), &key, value);
        TxnOp::put(key, value, None)
    }));
    let mut revision = 0;
    let mut transactions = 0;
    for batch in ops.chunks(MAX_TXN_OPS) {
        let response = client
            .txn(Txn::new().and_then(batch.to_vec()))
            .await
            .context("writing to etcd")?;
        revision = response.header().map_or(revision, |h| h.revision());
        transactions += 1;
    }
    Ok(Pushed {
        written,
        deleted,
        revision,
        transactions,
    })
}
