//! Where the configuration lives when it is not the node's own file: the
//! interface a shared store implements (the `wasmgate-cluster` crate, for
//! etcd). A node with a store applies what the store pushes through
//! [`crate::LiveGateway::apply`] (the same atomic build-and-swap as a file
//! reload), and its admin API's writes go to the store, with
//! compare-and-swap, instead of a file.

use std::future::Future;
use std::pin::Pin;

use wasmgate_config::AdminChanges;
use wasmgate_config::GatewayConfig;

pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub trait ConfigStore: Send + Sync {
    /// The configuration the store holds, as this node last read it: what
    /// an admin edit is made to (the next [`ConfigStore::write`] compares
    /// with it). It may be newer than what the node serves, or one the node
    /// could not build.
    fn latest(&self) -> Result<GatewayConfig, EditError>;

    /// Persists `changes` (made to what [`ConfigStore::latest`] returned).
    /// Fails with [`EditError::Conflict`] when another writer changed one of
    /// the entries since this node read it, so that two admins cannot
    /// lose each other's change.
    fn write(&self, changes: AdminChanges) -> StoreFuture<'_, Result<(), EditError>>;

    /// Why the configuration the store holds is not served here (it did
    /// not build on this node), if so.
    fn rejected(&self) -> Option<String>;

    /// Leaves the cluster at a clean stop: the node's registration goes at
    /// once instead of when its lease expires.
    fn leave(&self) -> StoreFuture<'_, ()>;

    /// Reads the whole configuration again and applies it (`POST /reload`).
    fn reload(&self) -> StoreFuture<'_, Result<u64, String>>;

    /// The nodes sharing the store, for `GET /cluster`.
    fn cluster(&self) -> StoreFuture<'_, serde_json::Value>;

    /// What `GET /status` shows of the store (endpoints, revision applied).
    fn describe(&self) -> serde_json::Value;

    /// The store revision this node serves (0 before the first).
    fn revision(&self) -> i64;
}

/// Why an admin API change was not applied.
#[derive(Debug)]
pub enum EditError {
    /// The named route, upstream or plugin does not exist.
    NotFound(String),
    /// The configuration's source does not take admin writes (file mode
    /// without `admin_writes`).
    WritesOff(String),
    /// Another writer changed the entry since this node last saw it.
    Conflict(String),
    /// The store (etcd) could not be reached or refused the write.
    StoreUnavailable(String),
    /// The change was checked or built and refused, for these reasons.
    Invalid(String),
}

impl EditError {
    /// The reason, for triggers that report only text.
    pub fn into_reason(self) -> String {
        match self {
            EditError::NotFound(reason)
            | EditError::WritesOff(reason)
            | EditError::Conflict(reason)
            | EditError::StoreUnavailable(reason)
            | EditError::Invalid(reason) => reason,
        }
    }
}
