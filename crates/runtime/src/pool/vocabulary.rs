//! What a pool is told and what it tells: its sizing and policy
//! ([`PoolConfig`]), why no instance could be had ([`AcquireError`]), and
//! its counters ([`PoolStats`]).

use std::time::Duration;

/// Sizing and policy of one pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most instances alive at once (checked out plus idle).
    pub max_instances: usize,
    /// Fresh instance for every call; nothing is reused.
    pub isolation: bool,
    /// How long a call may wait for a free instance before it is refused.
    pub acquire_timeout: Duration,
    /// Idle instances unused this long are dropped (all but the last used);
    /// `None`: kept until a reload.
    pub idle_timeout: Option<Duration>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_instances: 64,
            isolation: false,
            acquire_timeout: Duration::from_secs(1),
            idle_timeout: None,
        }
    }
}

/// Why no instance could be had.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error("no instance became free within {waited:?} (at most {max} run at once, and they start one at a time)")]
    Overloaded { max: usize, waited: Duration },
    #[error("instantiation is backing off after {failures} consecutive failures (retry in {retry_after:?}); last error: {last_error}")]
    BackingOff {
        failures: u32,
        retry_after: Duration,
        last_error: String,
    },
    #[error("instantiation failed: {0:#}")]
    Instantiate(anyhow::Error),
}

/// Counters for status pages and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub created: u64,
    pub discarded: u64,
    pub instantiation_failures: u64,
    pub rejected: u64,
    /// Calls that found every instance busy and had to wait.
    pub waits: u64,
    /// Idle instances dropped after `idle_timeout`.
    pub expired: u64,
    /// Instantiations that failed in a row (0 once one succeeds).
    pub consecutive_failures: u32,
    /// Whether instantiation is in crash-loop backoff now.
    pub backing_off: bool,
    pub idle: usize,
    pub in_use: usize,
}
