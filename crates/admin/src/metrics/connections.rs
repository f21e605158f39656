//! Connections: TLS handshakes and certificates' expiry, each listener's
//! connections, and upgraded connections (WebSocket tunnels).

use std::fmt::Write;

use wasmgate_gateway::stats::ListenerCount;
use wasmgate_gateway::Gateway;

use super::text::{escape, family};

pub(super) fn tls_metrics(gateway: &Gateway, out: &mut String) {
    let handshakes = wasmgate_gateway::stats::tls_handshakes();
    family(
        out,
        "wasmgate_tls_handshakes_total",
        "counter",
        "TLS handshakes completed on the traffic listeners, full or resumed (a session ticket or the session cache).",
    );
    for (kind, n) in [("full", handshakes.full), ("resumed", handshakes.resumed)] {
        let _ = writeln!(out, "wasmgate_tls_handshakes_total{{kind=\"{kind}\"}} {n}");
    }
    family(
        out,
        "wasmgate_tls_handshake_failures_total",
        "counter",
        "TLS handshakes refused or abandoned, by reason (timeout, not_tls, protocol_version, no_shared_cipher, unknown_sni, client_certificate, other).",
    );
    for (reason, n) in handshakes.failed {
        let _ = writeln!(
            out,
            "wasmgate_tls_handshake_failures_total{{reason=\"{reason}\"}} {n}"
        );
    }
    if gateway.certificates.is_empty() {
        return;
    }
    family(
        out,
        "wasmgate_tls_certificate_expiry_timestamp_seconds",
        "gauge",
        "When each served certificate's leaf expires (notAfter), in seconds since the epoch.",
    );
    for certificate in &gateway.certificates {
        let _ = writeln!(
            out,
            "wasmgate_tls_certificate_expiry_timestamp_seconds{{certificate=\"{}\"}} {}",
            escape(&certificate.name),
            certificate.not_after
        );
    }
}

/// Each listener's connections (traffic and admin), since the process started.
pub(super) fn listener_metrics(out: &mut String) {
    /// A family: its name, type, help, and what it reads of a listener.
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&ListenerCount) -> u64,
    );
    let listeners = wasmgate_gateway::stats::listener_counts();
    let families: [Family; 3] = [
        (
            "wasmgate_listener_connections",
            "gauge",
            "Connections open now, by listener.",
            |l| l.open_connections as u64,
        ),
        (
            "wasmgate_listener_max_connections",
            "gauge",
            "The most connections each listener holds at once (max_connections).",
            |l| l.max_connections as u64,
        ),
        (
            "wasmgate_listener_connections_refused_total",
            "counter",
            "Connections closed as soon as they were accepted because the listener held max_connections.",
            |l| l.refused,
        ),
    ];
    for (name, kind, help, value) in families {
        family(out, name, kind, help);
        for l in &listeners {
            let address = escape(&l.address);
            let _ = writeln!(out, "{name}{{listener=\"{address}\"}} {}", value(l));
        }
    }
    family(
        out,
        "wasmgate_listener_connections_closed_total",
        "counter",
        "Connections the gateway closed while their client kept them, by listener and why (http2_idle_timeout: no open stream for limits.http2_idle_timeout_ms; canceled_streams: the client canceled most of its HTTP/2 streams).",
    );
    for l in &listeners {
        for (reason, n) in [
            ("http2_idle_timeout", l.closed_idle),
            ("canceled_streams", l.closed_canceled_streams),
        ] {
            let _ = writeln!(
                out,
                "wasmgate_listener_connections_closed_total{{listener=\"{}\",reason=\"{reason}\"}} {n}",
                escape(&l.address),
            );
        }
    }
}

/// Upgraded connections (WebSocket) by route: kept since the process
/// started, across reloads, since a tunnel outlives its configuration.
pub(super) fn tunnel_metrics(out: &mut String) {
    let tunnels = wasmgate_gateway::stats::tunnels();
    if tunnels.is_empty() {
        return;
    }
    family(
        out,
        "wasmgate_tunnels_open",
        "gauge",
        "Upgraded connections (WebSocket tunnels) open now, by route.",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        let _ = writeln!(out, "wasmgate_tunnels_open{{route=\"{route}\"}} {}", t.open);
    }
    family(
        out,
        "wasmgate_tunnels_total",
        "counter",
        "Upgraded connections opened (the upstream answered 101 and both sides switched), by route.",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        let _ = writeln!(
            out,
            "wasmgate_tunnels_total{{route=\"{route}\"}} {}",
            t.opened
        );
    }
    family(
        out,
        "wasmgate_tunnels_closed_total",
        "counter",
        "Upgraded connections closed, by route and why (closed, error, idle_timeout, max_duration).",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        for (end, n) in &t.ends {
            let _ = writeln!(
                out,
                "wasmgate_tunnels_closed_total{{route=\"{route}\",reason=\"{end}\"}} {n}"
            );
        }
    }
    family(
        out,
        "wasmgate_tunnel_bytes_total",
        "counter",
        "Bytes copied through upgraded connections, by route and direction (to_upstream, to_client).",
    );
    for t in &tunnels {
        let route = escape(&t.route);
        for (direction, n) in [
            ("to_upstream", t.bytes_to_upstream),
            ("to_client", t.bytes_to_client),
        ] {
            let _ = writeln!(
                out,
                "wasmgate_tunnel_bytes_total{{route=\"{route}\",direction=\"{direction}\"}} {n}"
            );
        }
    }
}
