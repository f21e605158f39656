//! The node's own settings: where it listens, its admin listener and
//! token, the configuration source (a file or etcd), and its limits. In
//! cluster mode these stay in each node's file; everything else is shared.
//!
//! - [`source`]: where the shared configuration comes from (etcd, Kubernetes).
//! - [`overrides`]: `wasmgate run --listen/--admin`.
//! - [`telemetry`]: the access log and tracing.
//! - [`limits`]: the node's limits, Proxy-Wasm's host limits among them.
//!
//! Here: the admin token's variable, the default address, and the checks of
//! the node's addresses, admin origins and token.

mod limits;
mod overrides;
mod source;
mod telemetry;

pub use limits::{Limits, ProxyWasmLimits};
pub(crate) use overrides::apply_overrides;
pub use overrides::{overrides, set_overrides, NodeOverrides};
pub use source::{ConfigSource, KubernetesSource};
pub use telemetry::{check_tracing, AccessLogConfig, AccessLogFormat, OtlpProtocol, TracingConfig};

use crate::GatewayConfig;

/// Environment variable that sets (and overrides) `admin_token`.
pub const ADMIN_TOKEN_ENV: &str = "WASMGATE_ADMIN_TOKEN";

pub(crate) fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

/// Addresses, admin origins and token, limits.
pub(crate) fn check(config: &GatewayConfig, problem: &mut dyn FnMut(String, String)) {
    for (field, address) in [
        ("listen", config.listen.as_ref()),
        ("admin", config.admin.as_ref()),
        ("probes", config.probes.as_ref()),
    ] {
        if let Some(address) = address {
            if address.parse::<std::net::SocketAddr>().is_err() {
                problem(
                    field.into(),
                    format!("`{address}` is not an IP:port address"),
                );
            }
        }
    }
    for (i, origin) in config.admin_origins.iter().enumerate() {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let authority = authority.map(|a| a.trim_end_matches('/'));
        if authority.is_none_or(|a| a.is_empty() || a.contains('/')) {
            problem(
                format!("admin_origins[{i}]"),
                format!("`{origin}` is not an origin: write scheme://host[:port], as `https://ops.example`"),
            );
        }
    }
    if config
        .limits
        .long_call_nice
        .is_some_and(|n| !(0..=19).contains(&n))
    {
        problem(
            "limits.long_call_nice".into(),
            "must be 0-19 (a nice value; higher leaves more of a busy CPU to request handling)"
                .into(),
        );
    }
    if config.limits.long_call_threads == Some(0) {
        problem(
            "limits.long_call_threads".into(),
            "must be at least 1 (long guest calls need a thread to run on)".into(),
        );
    }
    let limits = &config.limits;
    for (field, value, what) in [
        (
            "max_connections",
            limits.max_connections as u64,
            "a listener could take no connection",
        ),
        (
            "http2_idle_timeout_ms",
            limits.http2_idle_timeout_ms,
            "HTTP/2 connections would be closed at once",
        ),
        (
            "http2_keepalive_timeout_ms",
            limits.http2_keepalive_timeout_ms,
            "no PING could be answered in time",
        ),
        (
            "http2_max_concurrent_streams",
            u64::from(limits.http2_max_concurrent_streams),
            "an HTTP/2 client could send no request",
        ),
        (
            "http2_max_header_list_bytes",
            u64::from(limits.http2_max_header_list_bytes),
            "no HTTP/2 request would fit",
        ),
    ] {
        if value == 0 {
            problem(
                format!("limits.{field}"),
                format!("must be more than 0 ({what})"),
            );
        }
    }
    for (i, listener) in config.listeners.iter().enumerate() {
        if listener.max_connections == Some(0) {
            problem(
                format!("listeners[{i}].max_connections"),
                "must be more than 0 (the listener could take no connection; leave it out for limits.max_connections)".into(),
            );
        }
    }
    if let Some(tracing) = &config.tracing {
        check_tracing(tracing, problem);
    }
    if let Some(Ok(address)) = config
        .admin
        .as_ref()
        .map(|a| a.parse::<std::net::SocketAddr>())
    {
        let token = config.admin_token.is_some()
            || std::env::var_os(ADMIN_TOKEN_ENV).is_some_and(|t| !t.is_empty());
        if !address.ip().is_loopback() && !token {
            problem(
                "admin".into(),
                format!("the admin API on a non-loopback address ({address}) needs a token: set `admin_token` or {ADMIN_TOKEN_ENV}"),
            );
        }
    }
}
