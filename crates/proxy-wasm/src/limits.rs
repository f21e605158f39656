//! Caps on what a filter can make the host hold for it outside its own
//! linear memory (which `memory_limit` already caps): the replies of its
//! calls, the calls it has in flight, the messages it queues on gRPC
//! streams and those it has not read yet, and shared data and queues. Each
//! is a node setting (`limits.proxy_wasm`, docs/proxy-wasm.md "Host
//! limits"); a call over one is refused with a status the SDKs handle,
//! counted per plugin and limit (`wasmgate_plugin_host_limit_refusals_total`)
//! and logged, at most every [`LOG_EVERY`] per plugin and limit.
//!
//! The ABI has no status for "resource exhausted", and the Rust SDK panics on
//! a status its wrapper does not expect, so each function answers one it
//! does expect where one fits (docs/proxy-wasm.md lists them):
//! `InternalFailure` for calls, `BadArgument` for `proxy_grpc_send`,
//! `NotFound` for `proxy_enqueue_shared_queue`. `proxy_set_shared_data`
//! and `proxy_register_shared_queue` have none that fits (the Rust SDK
//! takes only `Ok` and `CasMismatch`, and `CasMismatch` would spin a CAS
//! loop for ever); they answer `BadArgument` (a value that can never fit)
//! or `InternalFailure` (the VM id's share is full), which the Go SDKs and
//! Higress's framework return as errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::filter_shared::FilterShared;

/// The caps, with the defaults `limits.proxy_wasm` documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// Largest body of an `proxy_http_call` or `proxy_grpc_call` reply; a
    /// larger one is not read further and the call fails (RESOURCE_EXHAUSTED).
    pub call_reply_bytes: usize,
    /// Calls and gRPC streams one context (a request's, or a root's) may
    /// have in flight at once, those dispatched in the running callback
    /// included.
    pub calls_in_flight: usize,
    /// Bytes of messages one gRPC stream holds that the connection has not
    /// taken yet (sent faster than the server reads).
    pub grpc_send_queue_bytes: usize,
    /// The same, in messages.
    pub grpc_send_queue_messages: usize,
    /// Bytes of gRPC stream messages received for one context and not yet
    /// delivered to the filter; beyond it the servers wait (HTTP/2 flow
    /// control), nothing is refused.
    pub grpc_receive_bytes: usize,
    /// Largest shared-data entry, key and value.
    pub shared_data_value_bytes: usize,
    /// Shared data of one VM id, keys and values.
    pub shared_data_bytes: usize,
    /// Keys of one VM id's shared data.
    pub shared_data_keys: usize,
    /// Shared queues one VM id may register.
    pub shared_queues: usize,
    /// Items waiting in one shared queue.
    pub shared_queue_items: usize,
    /// Bytes waiting in one shared queue.
    pub shared_queue_bytes: usize,
}

const MIB: usize = 1 << 20;

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits {
            call_reply_bytes: 4 * MIB,
            calls_in_flight: 64,
            grpc_send_queue_bytes: 4 * MIB,
            grpc_send_queue_messages: 1024,
            grpc_receive_bytes: 8 * MIB,
            shared_data_value_bytes: MIB,
            shared_data_bytes: 32 * MIB,
            shared_data_keys: 65_536,
            shared_queues: 16,
            shared_queue_items: 10_000,
            shared_queue_bytes: 4 * MIB,
        }
    }
}

impl HostLimits {
    /// No cap at all: what the embedder's own calls into the shared store
    /// (tests, tools) get.
    pub fn unlimited() -> HostLimits {
        HostLimits {
            call_reply_bytes: usize::MAX,
            calls_in_flight: usize::MAX,
            grpc_send_queue_bytes: usize::MAX,
            grpc_send_queue_messages: usize::MAX,
            grpc_receive_bytes: usize::MAX,
            shared_data_value_bytes: usize::MAX,
            shared_data_bytes: usize::MAX,
            shared_data_keys: usize::MAX,
            shared_queues: usize::MAX,
            shared_queue_items: usize::MAX,
            shared_queue_bytes: usize::MAX,
        }
    }

    /// The value of `limit`.
    pub fn of(&self, limit: Limit) -> usize {
        match limit {
            Limit::CallReplyBytes => self.call_reply_bytes,
            Limit::CallsInFlight => self.calls_in_flight,
            Limit::GrpcSendQueueBytes => self.grpc_send_queue_bytes,
            Limit::GrpcSendQueueMessages => self.grpc_send_queue_messages,
            Limit::SharedDataValueBytes => self.shared_data_value_bytes,
            Limit::SharedDataBytes => self.shared_data_bytes,
            Limit::SharedDataKeys => self.shared_data_keys,
            Limit::SharedQueues => self.shared_queues,
            Limit::SharedQueueItems => self.shared_queue_items,
            Limit::SharedQueueBytes => self.shared_queue_bytes,
        }
    }
}

/// A cap that refuses calls (`grpc_receive_bytes` only makes servers wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    CallReplyBytes,
    CallsInFlight,
    GrpcSendQueueBytes,
    GrpcSendQueueMessages,
    SharedDataValueBytes,
    SharedDataBytes,
    SharedDataKeys,
    SharedQueues,
    SharedQueueItems,
    SharedQueueBytes,
}

impl Limit {
    pub const ALL: [Limit; 10] = [
        Limit::CallReplyBytes,
        Limit::CallsInFlight,
        Limit::GrpcSendQueueBytes,
        Limit::GrpcSendQueueMessages,
        Limit::SharedDataValueBytes,
        Limit::SharedDataBytes,
        Limit::SharedDataKeys,
        Limit::SharedQueues,
        Limit::SharedQueueItems,
        Limit::SharedQueueBytes,
    ];

    /// Its setting's name under `limits.proxy_wasm`, and its `limit` label.
    pub fn name(self) -> &'static str {
        match self {
            Limit::CallReplyBytes => "call_reply_bytes",
            Limit::CallsInFlight => "calls_in_flight",
            Limit::GrpcSendQueueBytes => "grpc_send_queue_bytes",
            Limit::GrpcSendQueueMessages => "grpc_send_queue_messages",
            Limit::SharedDataValueBytes => "shared_data_value_bytes",
            Limit::SharedDataBytes => "shared_data_bytes",
            Limit::SharedDataKeys => "shared_data_keys",
            Limit::SharedQueues => "shared_queues",
            Limit::SharedQueueItems => "shared_queue_items",
            Limit::SharedQueueBytes => "shared_queue_bytes",
        }
    }

    pub fn names() -> [&'static str; 10] {
        Limit::ALL.map(Limit::name)
    }
}

/// A refusal is logged at most this often per plugin and limit: a filter
/// that hits a cap on every request would flood the log. The counter
/// counts every one.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// When each limit's refusal was last logged for one plugin (ms on the
/// process's clock, 0 for never).
#[derive(Default)]
pub(crate) struct RefusalLog {
    last_ms: [AtomicU64; Limit::ALL.len()],
}

impl RefusalLog {
    /// Whether a refusal of `limit` now is to be logged.
    fn due(&self, limit: Limit) -> bool {
        let now = since_start().as_millis() as u64 + 1;
        let every = LOG_EVERY.as_millis() as u64;
        let last = &self.last_ms[limit as usize];
        let seen = last.load(Ordering::Relaxed);
        (seen == 0 || now.saturating_sub(seen) >= every)
            && last
                .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

fn since_start() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// Counts a call `function` made that `limit` refused, and logs it (at most
/// every [`LOG_EVERY`] per plugin and limit) with the plugin, its route,
/// the limit and its value.
pub(crate) fn refuse(plugin: &FilterShared, limit: Limit, function: &'static str) {
    plugin.stats.record_refusal(limit.name());
    if plugin.refusals.due(limit) {
        let config = &plugin.config;
        tracing::warn!(
            plugin = %config.name,
            route = %config.route,
            function,
            limit = limit.name(),
            value = config.limits.of(limit),
            "a host limit refused the filter's call: limits.proxy_wasm.{} is {} (logged at most every {} s per plugin and limit; wasmgate_plugin_host_limit_refusals_total counts each)",
            limit.name(),
            config.limits.of(limit),
            LOG_EVERY.as_secs(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_has_its_own_name_and_log_slot() {
        let names = Limit::names();
        let mut unique = names.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        for (i, limit) in Limit::ALL.iter().enumerate() {
            assert_eq!(*limit as usize, i);
        }
    }

    #[test]
    fn a_refusal_is_logged_once_per_period() {
        let log = RefusalLog::default();
        assert!(log.due(Limit::SharedQueueItems));
        assert!(!log.due(Limit::SharedQueueItems), "within the period");
        assert!(log.due(Limit::SharedDataKeys), "each limit apart");
    }
}
