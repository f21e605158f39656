//! Where the configuration lives when it is not the node's own file: the
//! interface a shared store implements (the `wasmgate-cluster` crate, for
//! etcd). A node with a store applies what the store pushes through
//! [`crate::LiveGateway::apply`] (the same atomic build-and-swap as a file
//! reload), and its admin API's writes go to the store, with
//! compare-and-swap, instead of a file.

use std::future::Future;
use std::pin::Pin;

use crate::admin_file::AdminChanges;
use crate::reload::EditError;

pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub trait ConfigStore: Send + Sync {
    /// Persists `changes` (made to the configuration this node serves).
    /// Fails with [`EditError::Conflict`] when another writer changed one of
    /// the entries since this node last saw it, so that two admins cannot
    /// lose each other's change.
    fn write(&self, changes: AdminChanges) -> StoreFuture<'_, Result<(), EditError>>;

    /// Reads the whole configuration again and applies it (`POST /reload`).
    fn reload(&self) -> StoreFuture<'_, Result<u64, String>>;

    /// The nodes sharing the store, for `GET /cluster`.
    fn cluster(&self) -> StoreFuture<'_, serde_json::Value>;

    /// What `GET /status` shows of the store (endpoints, revision applied).
    fn describe(&self) -> serde_json::Value;

    /// The store revision this node serves (0 before the first).
    fn revision(&self) -> i64;
}
