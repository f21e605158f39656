//! `proxy_get_property`: values set with `proxy_set_property` (or by the
//! embedder), the plugin's own names, request/response attributes derived
//! from the header maps, and connection and upstream facts from
//! [`crate::exchange::RequestInfo`]. Envoy's attribute names
//! (`arch_overview_attributes`) and the top-level ones its Wasm host and
//! Higress's add (`plugin_name`, `route_name`, `cluster_name`, ...).
//!
//! Everything is computed here, when a filter asks: the request path only
//! records what it already has. Numbers are 8-byte little-endian integers,
//! durations and timestamps nanoseconds in the same form, booleans one byte
//! and maps the header-map pairs, as Envoy's Wasm host serializes them.
//! What wasmgate does not offer, and why, is in docs/proxy-wasm.md.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::UNIX_EPOCH;

use wasmgate_base::hex;

use crate::exchange::{HttpExchange, RequestInfo, TlsInfo, UpstreamFacts};
use crate::headers::Headers;
use crate::pairs;
use crate::state::FilterState;

pub(crate) fn get(state: &FilterState, path: &[u8]) -> Option<Vec<u8>> {
    let path = path.strip_suffix(&[0]).unwrap_or(path);
    if let Some(value) = state.exchange.properties.get(path) {
        return Some(value.clone());
    }
    let exchange = &state.exchange;
    let info = &exchange.info;
    let plugin = &state.plugin;
    let text = |value: &str| Some(value.as_bytes().to_vec());
    match pairs::property_path(path).as_slice() {
        [b"plugin_name"] => text(&plugin.config.name),
        [b"plugin_root_id"] => text(&plugin.config.root_id),
        [b"plugin_vm_id"] => text(&plugin.config.vm_id),
        // Higress's: the instance's linear memory, read by its framework to
        // decide when to ask for a rebuild (`wasm_need_rebuild`).
        [b"plugin_vm_memory"] => Some(integer(state.limiter.committed_bytes() as i64)),
        // The top-level names of Envoy's Wasm host (and Higress's), and the
        // `xds.*` ones Envoy moved them to.
        [b"route_name"] | [b"xds", b"route_name"] => text(&plugin.config.route),
        [b"cluster_name"] | [b"xds", b"cluster_name"] => {
            info.cluster.as_ref().and_then(|c| text(&c.cluster_name))
        }
        [b"connection_id"] => Some(integer(info.connection_id as i64)),
        [b"request", field @ ..] => request(exchange, field),
        [b"response", field @ ..] => response(exchange, field),
        [b"source", field] => address(info.source, field),
        [b"destination", field] => address(info.destination, field),
        [b"connection", b"id"] => Some(integer(info.connection_id as i64)),
        [b"connection", field] => connection(info.tls.as_deref(), field),
        [b"upstream", field] => upstream(info, field),
        _ => None,
    }
}

/// `request.*`: the request's headers as the filters left them, and what
/// the embedder recorded.
fn request(exchange: &HttpExchange, field: &[&[u8]]) -> Option<Vec<u8>> {
    let headers = &exchange.request_headers;
    let info = &exchange.info;
    let first = |name: &[u8]| headers.get(name).map(<[u8]>::to_vec);
    match field {
        [b"headers"] => Some(map(headers)),
        [b"headers", name] => joined(headers, name).map(Cow::into_owned),
        [b"path"] => first(b":path"),
        [b"url_path"] => first(b":path").map(|p| before(&p, b'?').to_vec()),
        // Envoy's: empty without a `?`, and without a `#fragment`.
        [b"query"] => first(b":path").map(|p| match p.iter().position(|&b| b == b'?') {
            Some(at) => before(&p[at + 1..], b'#').to_vec(),
            None => Vec::new(),
        }),
        [b"method"] => first(b":method"),
        [b"host"] => first(b":authority"),
        [b"scheme"] => first(b":scheme"),
        [b"referer"] => first(b"referer"),
        [b"useragent"] => first(b"user-agent"),
        [b"id"] => Some(format!("{:016x}", info.id).into_bytes()),
        [b"protocol"] => Some(info.protocol.as_bytes().to_vec()),
        [b"trace_id"] => info
            .trace
            .as_ref()
            .map(|t| hex::encode(&t.trace_id).into_bytes()),
        [b"span_id"] => info
            .trace
            .as_ref()
            .map(|t| hex::encode(&t.span_id).into_bytes()),
        [b"time"] => info.start_time.map(|t| {
            let nanos = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
            integer(nanos as i64)
        }),
        // Once the stream is over, as in Envoy (its `proxy_on_log`).
        [b"duration"] if info.complete => info
            .start_time
            .map(|t| integer(t.elapsed().unwrap_or_default().as_nanos() as i64)),
        // The declared length when there is one (absent when it does not
        // parse), else the body bytes received so far: Envoy's rule.
        [b"size"] => match headers.get(b"content-length") {
            Some(length) => number(length).map(integer),
            None => Some(integer(info.request_body_bytes as i64)),
        },
        [b"headers_bytes"] => Some(integer(byte_size(headers))),
        [b"total_size"] => Some(integer(info.request_body_bytes as i64 + byte_size(headers))),
        _ => None,
    }
}

/// `response.*`: present from the start, as Envoy's are; the code, the
/// headers' values and the gRPC status once the response's headers exist.
fn response(exchange: &HttpExchange, field: &[&[u8]]) -> Option<Vec<u8>> {
    let headers = &exchange.response_headers;
    let trailers = &exchange.response_trailers;
    let sent = exchange.info.response_body_bytes as i64;
    match field {
        [b"code"] => status(exchange).map(integer),
        [b"code_details"] => exchange
            .response_details
            .as_ref()
            .map(|d| d.as_bytes().to_vec()),
        [b"flags"] => Some(integer(response_flags(
            exchange.response_details.as_deref(),
        ))),
        [b"grpc_status"] => grpc_status(exchange).map(integer),
        [b"headers"] => Some(map(headers)),
        [b"headers", name] => joined(headers, name).map(Cow::into_owned),
        [b"trailers"] => Some(map(trailers)),
        [b"trailers", name] => joined(trailers, name).map(Cow::into_owned),
        // The body bytes sent on so far (Envoy's `bytesSent`).
        [b"size"] => Some(integer(sent)),
        [b"headers_bytes"] => Some(integer(byte_size(headers))),
        [b"total_size"] => Some(integer(sent + byte_size(headers) + byte_size(trailers))),
        _ => None,
    }
}

/// `connection.*` of the client's connection. On a plain connection only
/// `mtls` (false) and `requested_server_name` (empty) exist, as in Envoy;
/// on a TLS one the peer's facts exist when it presented a certificate
/// (its subject is empty otherwise).
fn connection(tls: Option<&TlsInfo>, field: &[u8]) -> Option<Vec<u8>> {
    let text = |value: &str| Some(value.as_bytes().to_vec());
    match field {
        b"mtls" => {
            return Some(vec![u8::from(
                tls.is_some_and(|t| t.peer_subject.is_some()),
            )])
        }
        b"requested_server_name" => {
            return text(tls.and_then(|t| t.sni.as_deref()).unwrap_or_default())
        }
        _ => {}
    }
    let tls = tls?;
    match field {
        b"tls_version" => text(tls.version),
        b"subject_peer_certificate" => text(tls.peer_subject.as_deref().unwrap_or_default()),
        b"uri_san_peer_certificate" => tls.peer_uri_sans.first().and_then(|s| text(s)),
        b"dns_san_peer_certificate" => tls.peer_dns_sans.first().and_then(|s| text(s)),
        b"sha256_peer_certificate_digest" => {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(tls.peer_certificate.as_deref()?);
            Some(hex::encode(&digest).into_bytes())
        }
        b"peer_certificate" => Some(url_encoded_pem(tls.peer_certificate.as_deref()?)),
        _ => None,
    }
}

/// `upstream.*` of the route's upstream: its size always; the node once
/// the request went to it, when the node is known (see
/// [`RequestInfo::upstream_node`]).
fn upstream(info: &RequestInfo, field: &[u8]) -> Option<Vec<u8>> {
    let facts = info.cluster.as_deref()?;
    match field {
        b"num_endpoints" => Some(integer(facts.nodes.len() as i64)),
        b"address" => upstream_node(info, facts).map(|a| a.as_bytes().to_vec()),
        b"port" => upstream_node(info, facts)
            .and_then(|a| a.rsplit_once(':')?.1.parse::<u16>().ok())
            .map(|port| integer(i64::from(port))),
        _ => None,
    }
}

fn upstream_node<'a>(info: &'a RequestInfo, facts: &'a UpstreamFacts) -> Option<&'a str> {
    if !info.upstream_sent {
        return None;
    }
    info.upstream_node.as_deref().or_else(|| facts.only_node())
}

fn integer(value: i64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

/// A decimal number in a header value (surrounding blanks allowed).
fn number(value: &[u8]) -> Option<i64> {
    std::str::from_utf8(value).ok()?.trim().parse::<i64>().ok()
}

/// `bytes` up to the first `stop`.
fn before(bytes: &[u8], stop: u8) -> &[u8] {
    bytes.split(|&b| b == stop).next().unwrap_or_default()
}

fn status(exchange: &HttpExchange) -> Option<i64> {
    number(exchange.response_headers.get(b":status")?)
}

/// Every value of `name` joined by commas, as Envoy reads a header for an
/// attribute; one value as it is.
fn joined<'a>(headers: &'a Headers, name: &[u8]) -> Option<Cow<'a, [u8]>> {
    let mut values = headers
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value);
    let first = values.next()?;
    let Some(second) = values.next() else {
        return Some(Cow::Borrowed(first));
    };
    let mut all = [first, &b","[..], second].concat();
    for value in values {
        all.push(b',');
        all.extend_from_slice(value);
    }
    Some(Cow::Owned(all))
}

/// The whole map as Envoy serializes a map attribute: each name once (in
/// the order it first appears) with its values joined.
fn map(headers: &Headers) -> Vec<u8> {
    let mut names: Vec<&[u8]> = Vec::new();
    for (name, _) in headers.iter() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let entries: Vec<(&[u8], Cow<[u8]>)> = names
        .into_iter()
        .filter_map(|name| Some((name, joined(headers, name)?)))
        .collect();
    pairs::encode(&entries)
}

/// Envoy's `byteSize` of a header map: the lengths of its names and values,
/// pseudo-headers included.
fn byte_size(headers: &Headers) -> i64 {
    headers
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as i64)
        .sum()
}

/// Envoy's response flags as `response.flags` gives them (bit `n` for flag
/// `n` of its `CoreResponseFlag`), for the answers wasmgate can give that
/// carry one, told by their `response.code_details`.
fn response_flags(details: Option<&str>) -> i64 {
    const UPSTREAM_REQUEST_TIMEOUT: i64 = 1 << 2;
    const UPSTREAM_CONNECTION_FAILURE: i64 = 1 << 5;
    const DOWNSTREAM_CONNECTION_TERMINATION: i64 = 1 << 14;
    match details {
        Some("upstream_response_timeout") => UPSTREAM_REQUEST_TIMEOUT,
        Some(d) if d.starts_with("upstream_reset_before_response_started{connection_failure") => {
            UPSTREAM_CONNECTION_FAILURE
        }
        Some("downstream_remote_disconnect") => DOWNSTREAM_CONNECTION_TERMINATION,
        _ => 0,
    }
}

/// Envoy's rule: the trailers' `grpc-status`, else the headers' (a
/// trailers-only answer), else the one the HTTP status maps to (gRPC's
/// `http-grpc-status-mapping`, for any response); a value that is not a
/// known code is -1.
fn grpc_status(exchange: &HttpExchange) -> Option<i64> {
    let stated = |headers: &Headers| {
        let value = headers.get(b"grpc-status").filter(|v| !v.is_empty())?;
        let code = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        Some(code.filter(|&c| c <= 16).map_or(-1, |c| c as i64))
    };
    stated(&exchange.response_trailers)
        .or_else(|| stated(&exchange.response_headers))
        .or_else(|| {
            Some(match status(exchange)? {
                400 => 13,             // INTERNAL
                401 => 16,             // UNAUTHENTICATED
                403 => 7,              // PERMISSION_DENIED
                404 => 12,             // UNIMPLEMENTED
                429 | 502..=504 => 14, // UNAVAILABLE
                _ => 2,                // UNKNOWN
            })
        })
}

/// A DER certificate as PEM, URL-encoded as Envoy gives it: every byte but
/// letters, digits and `*-._` as `%XX`.
fn url_encoded_pem(der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    const KEPT: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC
        .remove(b'*')
        .remove(b'-')
        .remove(b'.')
        .remove(b'_');
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    utf8_percent_encode(&pem, KEPT).to_string().into_bytes()
}

fn address(address: Option<SocketAddr>, field: &[u8]) -> Option<Vec<u8>> {
    let address = address?;
    match field {
        b"address" => Some(address.to_string().into_bytes()),
        b"port" => Some(integer(i64::from(address.port()))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        let mut headers = Headers::default();
        for (name, value) in pairs {
            headers.add(name.as_bytes(), value.as_bytes().to_vec());
        }
        headers
    }

    fn int(value: Option<Vec<u8>>) -> Option<i64> {
        value.map(|v| i64::from_le_bytes(v.try_into().expect("8 bytes")))
    }

    #[test]
    fn request_headers_join_repeated_values_and_count_their_bytes() {
        let exchange = HttpExchange {
            request_headers: headers(&[
                (":path", "/a?x=1#top"),
                ("accept", "a"),
                ("user-agent", "ua/1"),
                ("accept", "b"),
            ]),
            ..HttpExchange::default()
        };
        let get = |field: &[&[u8]]| request(&exchange, field);
        assert_eq!(get(&[b"headers", b"Accept"]), Some(b"a,b".to_vec()));
        assert_eq!(get(&[b"useragent"]), Some(b"ua/1".to_vec()));
        assert_eq!(get(&[b"referer"]), None);
        assert_eq!(get(&[b"query"]), Some(b"x=1".to_vec()));
        let map = get(&[b"headers"]).unwrap();
        let decoded = pairs::decode(&map).unwrap();
        let names: Vec<&[u8]> = decoded.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(names, [&b":path"[..], b"accept", b"user-agent"]);
        assert_eq!(decoded[1].1, b"a,b");
        let bytes = ":path/a?x=1#top".len() + "accepta".len() * 2 + "user-agentua/1".len();
        assert_eq!(int(get(&[b"headers_bytes"])), Some(bytes as i64));
    }

    #[test]
    fn request_size_is_the_declared_length_else_the_bytes_received() {
        let mut exchange = HttpExchange::default();
        exchange.info.request_body_bytes = 7;
        assert_eq!(int(request(&exchange, &[b"size"])), Some(7));
        exchange.request_headers = headers(&[("content-length", "12")]);
        assert_eq!(int(request(&exchange, &[b"size"])), Some(12));
        exchange.request_headers = headers(&[("content-length", "twelve")]);
        assert_eq!(request(&exchange, &[b"size"]), None);
    }

    #[test]
    fn request_duration_exists_once_the_stream_is_over() {
        let mut exchange = HttpExchange::default();
        exchange.info.start_time =
            Some(std::time::SystemTime::now() - std::time::Duration::from_millis(50));
        assert_eq!(request(&exchange, &[b"duration"]), None);
        exchange.info.complete = true;
        let nanos = int(request(&exchange, &[b"duration"])).unwrap();
        assert!((50_000_000..60_000_000_000).contains(&nanos), "{nanos}");
    }

    #[test]
    fn grpc_status_prefers_trailers_then_headers_then_the_http_status() {
        let mut exchange = HttpExchange::default();
        assert_eq!(grpc_status(&exchange), None);
        exchange.response_headers = headers(&[(":status", "503")]);
        assert_eq!(grpc_status(&exchange), Some(14));
        exchange.response_headers = headers(&[(":status", "200")]);
        assert_eq!(grpc_status(&exchange), Some(2));
        exchange.response_headers = headers(&[(":status", "200"), ("grpc-status", "5")]);
        assert_eq!(grpc_status(&exchange), Some(5));
        exchange.response_trailers = headers(&[("grpc-status", "0")]);
        assert_eq!(grpc_status(&exchange), Some(0));
        exchange.response_trailers = headers(&[("grpc-status", "17")]);
        assert_eq!(grpc_status(&exchange), Some(-1));
    }

    #[test]
    fn response_flags_follow_the_code_details() {
        assert_eq!(response_flags(None), 0);
        assert_eq!(response_flags(Some("via_upstream")), 0);
        assert_eq!(response_flags(Some("upstream_response_timeout")), 4);
        let refused = "upstream_reset_before_response_started{connection_failure,TLS_error}";
        assert_eq!(response_flags(Some(refused)), 32);
        assert_eq!(
            response_flags(Some("downstream_remote_disconnect")),
            1 << 14
        );
    }

    #[test]
    fn upstream_node_is_known_once_sent_for_one_node_or_when_reported() {
        let facts = |nodes: &[&str]| UpstreamFacts {
            cluster_name: "outbound|80||backend".into(),
            nodes: nodes.iter().map(|n| Arc::from(*n)).collect(),
        };
        let mut info = RequestInfo {
            cluster: Some(Arc::new(facts(&["10.0.0.1:8080"]))),
            ..RequestInfo::default()
        };
        assert_eq!(int(upstream(&info, b"num_endpoints")), Some(1));
        assert_eq!(upstream(&info, b"address"), None);
        info.upstream_sent = true;
        assert_eq!(upstream(&info, b"address"), Some(b"10.0.0.1:8080".to_vec()));
        assert_eq!(int(upstream(&info, b"port")), Some(8080));
        info.cluster = Some(Arc::new(facts(&["a:1", "b:2"])));
        assert_eq!(int(upstream(&info, b"num_endpoints")), Some(2));
        assert_eq!(upstream(&info, b"address"), None);
        info.upstream_node = Some("b:2".into());
        assert_eq!(int(upstream(&info, b"port")), Some(2));
        info.cluster = None;
        assert_eq!(upstream(&info, b"address"), None);
    }

    #[test]
    fn connection_facts_exist_as_envoy_gives_them() {
        // Plain: only mtls and the (empty) server name.
        assert_eq!(connection(None, b"mtls"), Some(vec![0]));
        assert_eq!(connection(None, b"requested_server_name"), Some(Vec::new()));
        assert_eq!(connection(None, b"tls_version"), None);
        assert_eq!(connection(None, b"subject_peer_certificate"), None);
        // TLS without a client certificate: an empty subject, no SAN, no digest.
        let mut tls = TlsInfo {
            version: "TLSv1.3",
            sni: Some("shop.example".into()),
            ..TlsInfo::default()
        };
        assert_eq!(
            connection(Some(&tls), b"tls_version"),
            Some(b"TLSv1.3".to_vec())
        );
        assert_eq!(
            connection(Some(&tls), b"subject_peer_certificate"),
            Some(Vec::new())
        );
        assert_eq!(connection(Some(&tls), b"uri_san_peer_certificate"), None);
        assert_eq!(
            connection(Some(&tls), b"sha256_peer_certificate_digest"),
            None
        );
        assert_eq!(connection(Some(&tls), b"peer_certificate"), None);
        // With one: its digest (SHA-256 of "abc", FIPS 180-2's example).
        tls.peer_certificate = Some(b"abc".to_vec());
        assert_eq!(
            connection(Some(&tls), b"sha256_peer_certificate_digest"),
            Some(b"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".to_vec())
        );
    }

    #[test]
    fn a_certificate_is_pem_url_encoded() {
        // 49 bytes: 68 base64 characters, so a line of 64 and one of 4.
        let der: Vec<u8> = (0u8..49).map(|b| b.wrapping_mul(37)).collect();
        let encoded = String::from_utf8(url_encoded_pem(&der)).unwrap();
        assert!(
            encoded.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
            "{encoded}"
        );
        assert!(
            encoded.ends_with("%0A-----END%20CERTIFICATE-----%0A"),
            "{encoded}"
        );
        let decoded = percent_encoding::percent_decode_str(&encoded)
            .decode_utf8()
            .unwrap()
            .into_owned();
        let lines: Vec<&str> = decoded.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!((lines[1].len(), lines[2].len()), (64, 4));
        use base64::Engine;
        let body = [lines[1], lines[2]].concat();
        let back = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        assert_eq!(back, der);
        assert!(!encoded.contains(['+', '/', '=', ' ', '\n']));
    }
}
