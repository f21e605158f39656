//! How a filter plugin is set up ([`FilterConfig`]): its name, its VM and
//! plugin configurations, where its calls may go, its deadlines, pool and
//! limits.

use std::sync::Arc;
use std::time::Duration;

use wasmgate_runtime::PoolConfig;

use crate::http_call::HttpCaller;
use crate::limits::HostLimits;

/// Deadline of an instance's start-up (its start code, `proxy_on_vm_start`,
/// `proxy_on_configure`) unless the plugin says (`startup_timeout_ms`):
/// generous, as heavy filters take long (Higress's WAF with the OWASP CRS
/// parses its rules for about a minute of CPU at each start).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How a filter plugin is set up.
#[derive(Clone, Debug, Default)]
pub struct FilterConfig {
    /// Name in logs, errors and `plugin_name`.
    pub name: String,
    /// `vm_config.configuration`: what `proxy_on_vm_start` reads.
    pub vm_configuration: Vec<u8>,
    /// The per-route `conf`: what `proxy_on_configure` reads.
    pub plugin_configuration: Vec<u8>,
    /// `plugin_root_id` (default: empty, as Envoy).
    pub root_id: String,
    /// `plugin_vm_id`; instances of one VM id share data and queues.
    pub vm_id: String,
    /// The route the plugin filters (`route_name`, and in its log lines).
    pub route: String,
    /// Where `proxy_http_call` goes; without one every call is refused.
    pub http_caller: Option<Arc<dyn HttpCaller>>,
    /// The services this plugin may reach (Redis through Higress's
    /// `proxy_redis_call`); none by default.
    pub services: wasmgate_services::Grants,
    /// Linear memory cap of a started instance's callbacks (never below
    /// what its start left).
    pub memory_limit: Option<usize>,
    /// Linear memory cap while an instance starts (`memory_limit` when
    /// `None`).
    pub startup_memory_limit: Option<usize>,
    /// Deadline of one callback.
    pub timeout: Option<Duration>,
    /// Deadline of an instance's start-up ([`DEFAULT_STARTUP_TIMEOUT`] when
    /// `None`).
    pub startup_timeout: Option<Duration>,
    pub pool: PoolConfig,
    /// What the host holds for the plugin outside its memory (`limits.rs`).
    pub limits: HostLimits,
}
