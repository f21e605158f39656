//! The upstream endpoint: a request forwarded to one of an upstream's nodes,
//! as a proxy forwards it (RFC 9110's hop-by-hop rules, `X-Forwarded-*`,
//! `Via`), and the answer brought back the same way. Sending, retries and
//! balancing are the upstream module's; this is what the request looks like
//! on its way out and back.

use std::net::SocketAddr;

use bytes::Bytes;
use hyper::body::Body as _;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use wasmgate_config::HashOn;
use wasmgate_proxy_wasm::HttpExchange;

use wasmgate_answers::error_response;
use wasmgate_transport::body::{self, Body, ClientBody};
use wasmgate_transport::listener::Connection;
use wasmgate_upstream::{hash, OutboundBody, RequestHead, Upstream, UpstreamError};

const VIA: &str = "1.1 wasmgate";

/// A request no filter sees (the fast path: no exchange is built) as it
/// goes to `upstream`: its head, its body, and its hash key for a
/// consistent-hash upstream. (Made here, sent by the request path: an
/// `async fn` here would be one more future the request's would carry and
/// copy.)
pub(crate) fn outbound(
    upstream: &Upstream,
    parts: Parts,
    body: ClientBody,
    connection: &Connection,
    host: &str,
) -> (RequestHead, OutboundBody, Option<u64>) {
    let (head, key) = outbound_head(upstream, parts, connection, host);
    let outbound = if body.is_end_stream() {
        OutboundBody::Replayable(Bytes::new())
    } else {
        OutboundBody::Streaming(body::boxed(body))
    };
    (head, outbound, key)
}

/// [`outbound`]'s head and hash key, for a request whose body goes
/// elsewhere (an upgrade's, into its tunnel).
pub(crate) fn outbound_head(
    upstream: &Upstream,
    mut parts: Parts,
    connection: &Connection,
    host: &str,
) -> (RequestHead, Option<u64>) {
    let peer = connection.peer;
    let key = hash_key(upstream, &parts, peer);
    let authority = request_authority(&parts).unwrap_or_else(|| host.to_string());
    let secure = connection.tls.is_some();
    prepare_upstream_headers(&mut parts.headers, peer, &authority, secure);
    let head = RequestHead {
        method: parts.method,
        path: path_and_query(&parts.uri),
        headers: parts.headers,
    };
    (head, key)
}

/// An upstream's answer as the client gets it: hop-by-hop fields removed,
/// `Via` added.
pub(crate) fn answer(
    response: Response<wasmgate_transport::node_pool::PooledBody>,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    prepare_downstream_headers(&mut parts.headers);
    Response::from_parts(parts, body::boxed(body))
}

/// Host and port as the client sent them (URI for HTTP/2, Host for HTTP/1).
pub(crate) fn request_authority(parts: &Parts) -> Option<String> {
    parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)?
                .to_str()
                .ok()
                .map(str::to_string)
        })
}

/// What goes upstream after the filters: their pseudo-headers and a copy
/// of their header map (the exchange keeps its own: filters read the
/// request's headers until `proxy_on_log`).
pub(crate) fn upstream_head(exchange: &HttpExchange, peer: SocketAddr) -> RequestHead {
    let get = |name: &[u8]| exchange.request_headers.get(name);
    let mut headers = exchange.request_headers.map().clone();
    let authority = get(b":authority").unwrap_or_default();
    if let Ok(value) = HeaderValue::from_bytes(authority) {
        headers.insert(header::HOST, value);
    }
    let host = String::from_utf8_lossy(authority);
    prepare_upstream_headers(&mut headers, peer, &host, exchange.info.tls.is_some());
    RequestHead {
        method: get(b":method")
            .and_then(|m| hyper::Method::from_bytes(m).ok())
            .unwrap_or(hyper::Method::GET),
        path: get(b":path")
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_else(|| "/".into()),
        headers,
    }
}

/// Hop-by-hop headers are the connection's, not the message's (RFC 9110 7.6.1).
/// (`Trailer` is end-to-end: it names the trailers the message ends with.)
/// Names are constants: parsing them per request showed in profiles.
const HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
];
const HOP_COUNT: usize = 7;
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
/// Where `TE` is in [`HOP_BY_HOP`].
const TE_INDEX: usize = 3;

/// Where `name` is in [`HOP_BY_HOP`], if it is there. Each comparison is
/// with a constant, which the compiler reduces to a check of the name's
/// tag (or bytes, for the two names `http` has no constant for); iterating
/// the array instead builds (and drops) a copy of it per call, which cost
/// 300 instructions a request where the optimizer did not remove it.
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    if name == header::CONNECTION {
        Some(0)
    } else if name == KEEP_ALIVE {
        Some(1)
    } else if name == PROXY_CONNECTION {
        Some(2)
    } else if name == header::TE {
        Some(TE_INDEX)
    } else if name == header::TRANSFER_ENCODING {
        Some(4)
    } else if name == header::UPGRADE {
        Some(5)
    } else if name == header::PROXY_AUTHENTICATE {
        Some(6)
    } else {
        None
    }
}
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Removes the hop-by-hop fields, and the fields `Connection` names. Returns
/// whether a `TE` field was among them.
fn remove_hop_by_hop(headers: &mut HeaderMap) -> bool {
    // Most messages carry none of them, or only `Connection: keep-alive`
    // (every answer of an nginx upstream): one look at the names present
    // decides which to remove, instead of hashing seven names to remove.
    let mut present = [false; HOP_COUNT];
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index(name) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return false;
    }
    // `close` and `keep-alive` are connection options, not field names (a
    // `Keep-Alive` field is hop-by-hop anyway): only other tokens are parsed.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|token| {
            !token.eq_ignore_ascii_case("keep-alive") && !token.eq_ignore_ascii_case("close")
        })
        .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for (i, present) in present.into_iter().enumerate() {
        if present {
            headers.remove(&HOP_BY_HOP[i]);
        }
    }
    present[TE_INDEX]
}

/// X-Forwarded-For gets the client appended; -Proto and -Host are set when
/// no earlier proxy set them; Via records this hop.
pub(crate) fn prepare_upstream_headers(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    host: &str,
    secure: bool,
) {
    // `TE: trailers` says the client takes trailers (gRPC requires it); it
    // is passed on, as Envoy does, so the upstream sends them. Other TE
    // values are this hop's business.
    let accepts_trailers = headers
        .get_all(header::TE)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    if remove_hop_by_hop(headers) && accepts_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    let client = ip_text(peer.ip());
    let forwarded_for = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(earlier) => format!("{earlier}, {client}"),
        None => client,
    };
    // From the `String` itself: `from_str` would copy it.
    if let Ok(value) = HeaderValue::try_from(forwarded_for) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        let proto = if secure { "https" } else { "http" };
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if !headers.contains_key(&X_FORWARDED_HOST) {
        if let Ok(value) = HeaderValue::from_str(host) {
            headers.insert(X_FORWARDED_HOST, value);
        }
    }
    headers.append(header::VIA, HeaderValue::from_static(VIA));
}

/// The client's address as text. IPv4, the common case, is written
/// directly: through `Display` it took 1.3 k of a proxied request's 53 k
/// instructions (bench/instructions.py).
fn ip_text(ip: std::net::IpAddr) -> String {
    let std::net::IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut text = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

pub(crate) fn prepare_downstream_headers(headers: &mut HeaderMap) {
    // A `TE` in an answer means nothing (RFC 9110 10.1.4): dropped with the rest.
    remove_hop_by_hop(headers);
    headers.append(header::VIA, HeaderValue::from_static(VIA));
}

pub(crate) fn path_and_query(uri: &hyper::Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string())
}

pub(crate) fn hash_key(upstream: &Upstream, parts: &Parts, peer: SocketAddr) -> Option<u64> {
    if !upstream.hashes() {
        return None;
    }
    Some(match upstream.hash_on {
        HashOn::ClientIp => hash(&peer.ip()),
        HashOn::Path => hash(&parts.uri.path()),
        HashOn::Header => {
            let name = upstream.hash_header.as_deref()?;
            hash(&parts.headers.get(name)?.as_bytes())
        }
    })
}

pub(crate) fn exchange_hash_key(
    upstream: &Upstream,
    exchange: &HttpExchange,
    peer: SocketAddr,
) -> Option<u64> {
    if !upstream.hashes() {
        return None;
    }
    Some(match upstream.hash_on {
        HashOn::ClientIp => hash(&peer.ip()),
        HashOn::Path => {
            let path = exchange.request_headers.get(b":path")?;
            hash(&path.split(|&b| b == b'?').next().unwrap_or_default())
        }
        HashOn::Header => {
            let name = upstream.hash_header.as_deref()?;
            hash(&exchange.request_headers.get(name.as_bytes())?)
        }
    })
}

/// An upstream's failure as the client's answer: 504 for a timeout, 502
/// when no node could be reached.
pub(crate) fn upstream_error_response(error: UpstreamError) -> Response<Body> {
    let (status, kind) = status_and_kind(&error);
    wasmgate_transport::body::full_response(error_response::simple(status, kind, error.to_string()))
}

/// The answer's status and the error's kind (`upstream_tls`, ...), which
/// the log line and the answer both carry.
fn status_and_kind(error: &UpstreamError) -> (StatusCode, &'static str) {
    match error {
        UpstreamError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
        UpstreamError::Unreachable { .. } => (StatusCode::BAD_GATEWAY, "upstream_unreachable"),
        UpstreamError::Tls { .. } => (StatusCode::BAD_GATEWAY, "upstream_tls"),
        UpstreamError::ClientBody { status, .. } => (*status, "client_body"),
    }
}

/// What Envoy's `response.code_details` says of the gateway's answer to
/// an upstream's failure.
pub(crate) fn code_details(error: &UpstreamError) -> &'static str {
    match error {
        UpstreamError::Timeout { .. } => "upstream_response_timeout",
        UpstreamError::Unreachable { .. } => {
            "upstream_reset_before_response_started{connection_failure}"
        }
        UpstreamError::Tls { .. } => {
            "upstream_reset_before_response_started{connection_failure,TLS_error}"
        }
        UpstreamError::ClientBody { .. } => "downstream_remote_disconnect",
    }
}

pub(crate) fn upstream_failed(route: &str, error: UpstreamError) -> Response<Body> {
    let (_, kind) = status_and_kind(&error);
    tracing::warn!(%route, kind, error = %error, "upstream request failed");
    upstream_error_response(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_text_matches_display() {
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.0.100.9",
            "192.168.1.255",
            "255.255.255.255",
            "1.20.200.99",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:10.0.0.1",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(ip_text(ip), ip.to_string());
        }
    }

    fn map(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn hop_by_hop_fields_and_the_ones_connection_names_are_removed() {
        assert_eq!(HOP_BY_HOP[TE_INDEX], header::TE);
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(i));
        }
        assert_eq!(hop_by_hop_index(&header::HOST), None);
        let mut upstream_answer = map(&[("server", "nginx"), ("connection", "keep-alive")]);
        assert!(!remove_hop_by_hop(&mut upstream_answer));
        assert_eq!(upstream_answer, map(&[("server", "nginx")]));

        let mut request = map(&[
            ("connection", "close, X-Private"),
            ("connection", "keep-alive"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("x-kept", "2"),
        ]);
        assert!(remove_hop_by_hop(&mut request));
        assert_eq!(request, map(&[("x-kept", "2")]));

        let mut plain = map(&[("x-kept", "2")]);
        assert!(!remove_hop_by_hop(&mut plain));
        assert_eq!(plain, map(&[("x-kept", "2")]));
    }
}
