//! Higress's Redis extension of the ABI (`proxy_abi_version_0_2_100`), as
//! filters built on Higress's Go framework use it:
//!
//! - `proxy_redis_init(cluster, username, password, timeout_ms)` names a
//!   cluster (`outbound|6379||redis.static`, perhaps `?db=2`) and the
//!   credentials, database and per-command timeout to use with it. The
//!   cluster maps onto a Redis service granted to the plugin
//!   (`wasmgate_services::redis::service_for_cluster`); an unknown one is
//!   BadArgument, as in Envoy.
//! - `proxy_redis_call(cluster, query, *token)` records a command, already
//!   RESP-encoded by the guest, and returns a token.
//! - When Redis answers, the host calls `proxy_on_redis_call_response(root
//!   context, token, status, size)`: status 0 with the reply (exactly as
//!   Redis sent it, an error reply included) readable as buffer 9, or
//!   status 1 (network error) with nothing, when no answer came (down,
//!   refused, timed out). The framework then resumes or answers the stream
//!   it paused (`proxy_set_effective_context` + `proxy_continue_stream`).
//!
//! The host functions are in `host_env/redis.rs`; this module holds what a call
//! carries and how it is sent, through the services crate (the same pools
//! Extism plugins use).

use std::time::Duration;

use wasmgate_services::redis::Access;
use wasmgate_services::Grants;

/// What `proxy_redis_init` set up for a cluster, on one instance.
#[derive(Clone, Debug)]
pub(crate) struct RedisInit {
    pub access: Access,
    pub timeout: Option<Duration>,
}

/// A command recorded by `proxy_redis_call`.
#[derive(Debug)]
pub(crate) struct RedisCallRequest {
    pub cluster: String,
    pub access: Access,
    pub query: Vec<u8>,
    pub timeout: Option<Duration>,
}

/// Statuses of `proxy_on_redis_call_response`.
pub(crate) const REDIS_OK: u32 = 0;
pub(crate) const REDIS_NETWORK_ERROR: u32 = 1;

/// The cluster without its `?db=...` options.
pub(crate) fn base_cluster(cluster: &str) -> &str {
    cluster.split('?').next().unwrap_or(cluster)
}

impl RedisCallRequest {
    /// Sends the command; the reply RESP-encoded, or why none came.
    pub async fn send(self, grants: &Grants) -> Result<Vec<u8>, String> {
        let Some(service) = grants.redis_for_cluster(&self.cluster) else {
            return Err(format!("no Redis service for cluster `{}`", self.cluster));
        };
        service
            .call_resp(&self.access, &self.query, self.timeout)
            .await
            .map_err(|e| e.to_string())
    }
}
