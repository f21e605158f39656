//! Where a plugin's module comes from: a path, an `http(s)://` URL with its
//! `sha256` (`fetch.rs`, which decides among the three), or an OCI registry: `wasm: oci://registry/repository:tag` (or
//! `@sha256:...`), as Higress's and Istio's `WasmPlugin` name them. The
//! registry protocol is oci-client's; what is here is what a plugin host
//! adds around it: the layouts a module is published in (`layout.rs`),
//! credentials (`credentials.rs`), pull policy, limits and pinning
//! (`pull.rs`), and the store of what was pulled (`store.rs`).

mod credentials;
pub mod fetch;
mod layout;
mod manifests;
mod pull;
mod reference;
mod store;

use std::time::Duration;

pub use credentials::Credentials;
pub use pull::{pull, PullPolicy, PullSettings, Pulled};
pub use reference::{is_oci, OciReference, SCHEME};

/// Largest layer pulled, and module extracted, by default (a Go plugin is a
/// few MiB; the same limit as a module fetched by URL).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// Deadline of a whole pull by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
