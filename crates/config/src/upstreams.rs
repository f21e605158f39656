//! `upstreams`: named groups of nodes, how one is picked, and health checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// 1-64 letters, digits, `.`, `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    pub nodes: Vec<NodeConfig>,
    #[serde(default)]
    pub balance: Balance,
    /// consistent_hash: what the key is.
    #[serde(default)]
    pub hash_on: HashOn,
    /// hash_on: header: the header's name.
    #[serde(default)]
    pub hash_header: Option<String>,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Time allowed for the upstream's response headers.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// Further nodes tried after a connection failure (and, for requests
    /// without a body, after a failure before any response).
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default)]
    pub health_check: HealthCheckConfig,
    /// TLS to the nodes (`https`): SNI, trusted CAs, client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::UpstreamTls>,
    /// The HTTP version spoken to the nodes. Default `http1`.
    #[serde(default, skip_serializing_if = "UpstreamProtocol::is_default")]
    pub protocol: UpstreamProtocol,
}

/// How the gateway talks to an upstream's nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1, a pool of keep-alive connections per node (over TLS when
    /// `tls` is set).
    #[default]
    Http1,
    /// HTTP/2 without TLS (prior knowledge): one multiplexed connection per
    /// node carries every request. gRPC servers speak this.
    H2c,
    /// HTTP/2 over TLS (needs `tls`; ALPN `h2`, a node that does not agree
    /// fails the handshake).
    H2,
    /// Over TLS (needs `tls`), what the node chooses by ALPN: HTTP/2 when it
    /// offers `h2`, HTTP/1.1 otherwise.
    Auto,
}

impl UpstreamProtocol {
    fn is_default(&self) -> bool {
        *self == UpstreamProtocol::Http1
    }
}

fn default_connect_timeout_ms() -> u64 {
    3000
}

fn default_read_timeout_ms() -> u64 {
    30_000
}

fn default_retries() -> u32 {
    1
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// `host:port`.
    pub address: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Smooth weighted round robin.
    #[default]
    RoundRobin,
    /// A hash ring: one key always lands on the same healthy node.
    ConsistentHash,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HashOn {
    #[default]
    ClientIp,
    Path,
    Header,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Probes sent to every node on a timer.
    #[serde(default)]
    pub active: Option<ActiveCheck>,
    /// Failures of real requests take a node out for a while.
    #[serde(default)]
    pub passive: Option<PassiveCheck>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActiveCheck {
    #[serde(default = "default_check_path")]
    pub path: String,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    #[serde(default = "default_check_timeout_ms")]
    pub timeout_ms: u64,
    /// Consecutive successes that bring a node back.
    #[serde(default = "default_healthy")]
    pub healthy_threshold: u32,
    /// Consecutive failures that take a node out.
    #[serde(default = "default_unhealthy")]
    pub unhealthy_threshold: u32,
}

fn default_check_path() -> String {
    "/".into()
}

fn default_interval_ms() -> u64 {
    2000
}

fn default_check_timeout_ms() -> u64 {
    1000
}

fn default_healthy() -> u32 {
    2
}

fn default_unhealthy() -> u32 {
    3
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PassiveCheck {
    /// Consecutive failed requests (connect errors, timeouts, 502-504) that eject a node.
    #[serde(default = "default_unhealthy")]
    pub max_failures: u32,
    /// How long an ejected node stays out.
    #[serde(default = "default_ejection_ms")]
    pub ejection_ms: u64,
}

fn default_ejection_ms() -> u64 {
    10_000
}

/// Nodes, weights and the consistent-hash key.
pub(crate) fn check(upstreams: &[UpstreamConfig], problem: &mut dyn FnMut(String, String)) {
    for (i, u) in upstreams.iter().enumerate() {
        let at = crate::names::entry("upstreams", i, &u.name);
        if u.nodes.is_empty() {
            problem(
                format!("{at}.nodes"),
                "an upstream needs at least one node".into(),
            );
        }
        for (j, n) in u.nodes.iter().enumerate() {
            if !looks_like_host_port(&n.address) {
                problem(
                    format!("{at}.nodes[{j}].address"),
                    format!("`{}` is not host:port", n.address),
                );
            }
            if n.weight == 0 {
                problem(
                    format!("{at}.nodes[{j}].weight"),
                    "must be at least 1".into(),
                );
            }
        }
        if let Some(tls) = &u.tls {
            crate::tls::check_upstream(&at, tls, problem);
        }
        match (u.protocol, u.tls.is_some()) {
            (UpstreamProtocol::H2 | UpstreamProtocol::Auto, false) => problem(
                format!("{at}.protocol"),
                "h2 and auto are chosen by ALPN in the TLS handshake: they need `tls` \
                 (HTTP/2 without TLS is h2c)"
                    .into(),
            ),
            (UpstreamProtocol::H2c, true) => problem(
                format!("{at}.protocol"),
                "h2c is HTTP/2 without TLS: with `tls`, use h2 (or auto)".into(),
            ),
            _ => {}
        }
        if u.hash_on == HashOn::Header && u.hash_header.is_none() {
            problem(
                format!("{at}.hash_header"),
                "hash_on: header needs hash_header (the header's name)".into(),
            );
        }
    }
}

fn looks_like_host_port(address: &str) -> bool {
    match address.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}
