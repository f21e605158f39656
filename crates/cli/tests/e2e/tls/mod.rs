//! HTTPS listeners and TLS to upstreams (docs/tls.md), driven by the tools
//! users check a TLS server with: certificates made at test time by
//! `openssl` (wasmgate-testkit's `Pki`), `curl --resolve` for SNI and HTTP/2
//! by ALPN, `openssl s_client` for versions, ALPN and resumption, Python's
//! `ssl` for client certificates, h2spec for HTTP/2 over TLS; and a TLS
//! client of the test's own (rustls) for a certificate replaced under load.
//!
//! One module a concern: listeners, clients (refused, or with certificates),
//! a certificate replaced under load, and upstreams over TLS.

mod clients;
mod listeners;
mod replacement;
mod upstreams;

use crate::common::gateway::{metric, GatewayProc};
use crate::common::HttpClient;

/// How many TLS handshakes the gateway refused for `reason` (its metric).
async fn failures(c: &HttpClient, gw: &GatewayProc, reason: &str) -> f64 {
    metric(
        c,
        gw,
        &format!("wasmgate_tls_handshake_failures_total{{reason=\"{reason}\"}}"),
    )
    .await
}
