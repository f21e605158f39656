//! Who may talk to the admin API, before any endpoint runs.
//!
//! A loopback listener without a token is open to local programs, and so,
//! unless it checks, to any web page the operator has open: a page can send
//! "simple" cross-origin requests (GET, POST with a form or text body)
//! without asking first, and through DNS rebinding (a name that resolves to
//! the attacker, then to 127.0.0.1) it becomes same-origin and can read the
//! answers too. Three checks close that, each answering 403 with what failed
//! and how to allow it:
//!
//! 1. **Host** must name this listener: its own IP, a loopback name or IP when
//!    the client came over loopback, or a name in `admin_hosts`. A rebound
//!    page sends its own name (`evil.example`), which is refused. IP literals
//!    cannot be rebound, so the address the client connected to is accepted.
//! 2. **Origin**, when a browser sends one, must be the listener's own origin
//!    (the dashboard is served from it) or one listed in `admin_origins`,
//!    which alone get CORS headers.
//! 3. **Intent**: without a token, a `POST` must be something a browser cannot
//!    send cross-origin without a preflight: a content type other than the
//!    three form/text types, or the `X-Wasmgate-Admin` header. (`PUT` and
//!    `DELETE` always need a preflight, which the listener refuses to foreign
//!    origins.) With a token configured, the token is required instead.

use std::net::{IpAddr, SocketAddr};

use hyper::header::{HeaderValue, CONTENT_TYPE, HOST, ORIGIN};
use hyper::{HeaderMap, Method, StatusCode};
use serde_json::json;

use super::Reply;

/// The header that marks a request as deliberate when no token is set.
pub const INTENT_HEADER: &str = "x-wasmgate-admin";

/// What the checks need from the configuration.
pub struct Policy<'a> {
    /// `admin_hosts`: further names the listener answers to (`*.` wildcards).
    pub hosts: &'a [String],
    /// `admin_origins`: origins allowed to call cross-origin (with CORS).
    pub origins: &'a [String],
    /// Whether a token is configured (then it is checked instead of intent).
    pub token_configured: bool,
}

/// The verdict on a request: go on (with CORS headers for an allowed foreign
/// origin), or answer this at once.
pub enum Verdict {
    Proceed { cors_origin: Option<HeaderValue> },
    Answer(Reply),
}

/// Runs the Host and Origin checks (and answers preflights).
pub fn check_caller(
    policy: &Policy<'_>,
    method: &Method,
    headers: &HeaderMap,
    local: SocketAddr,
) -> Verdict {
    let host = headers.get(HOST).and_then(|h| h.to_str().ok());
    if let Some(host) = host {
        if !host_allowed(host, local.ip(), policy.hosts) {
            return Verdict::Answer(refused(
                "host",
                format!(
                    "Host `{host}` does not name this admin listener ({local}); requests must use its address, a loopback name such as localhost, or a name listed in `admin_hosts` (this guards against DNS rebinding)"
                ),
            ));
        }
    }
    let mut cors_origin = None;
    if let Some(origin) = headers.get(ORIGIN) {
        let text = origin.to_str().unwrap_or("");
        let own = host.is_some_and(|host| same_origin(text, host));
        if !own {
            if !policy.origins.iter().any(|o| origin_eq(o, text)) {
                return Verdict::Answer(refused(
                    "origin",
                    format!(
                        "cross-origin request from `{text}` refused: the admin API answers its own origin only; add the origin to `admin_origins` to allow it"
                    ),
                ));
            }
            cors_origin = Some(origin.clone());
        }
    }
    if method == Method::OPTIONS {
        return Verdict::Answer(preflight(cors_origin));
    }
    Verdict::Proceed { cors_origin }
}

/// A state-changing request without a token must show intent (see the module docs).
pub fn check_intent(policy: &Policy<'_>, method: &Method, headers: &HeaderMap) -> Option<Reply> {
    if policy.token_configured || method != Method::POST {
        return None;
    }
    if headers.contains_key(INTENT_HEADER) {
        return None;
    }
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    match content_type.as_deref() {
        Some(essence) if !essence.is_empty() && !is_simple_content_type(essence) => None,
        _ => Some(refused(
            "intent",
            "a POST to the admin API without a token needs `Content-Type: application/json` or the header `X-Wasmgate-Admin: 1` (so that no web page can send it)".to_string(),
        )),
    }
}

/// The content types a browser sends cross-origin without a preflight.
fn is_simple_content_type(essence: &str) -> bool {
    matches!(
        essence,
        "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"
    )
}

fn refused(check: &str, message: String) -> Reply {
    Reply::json(
        StatusCode::FORBIDDEN,
        json!({ "error": message, "check": check }),
    )
}

/// Preflight: only origins in `admin_origins` get here with a CORS origin.
fn preflight(cors_origin: Option<HeaderValue>) -> Reply {
    let mut reply = Reply::text(StatusCode::NO_CONTENT, "text/plain", "");
    if let Some(origin) = cors_origin {
        reply.cors = Some(origin);
        reply.preflight = true;
    }
    reply
}

/// Whether `host` (a Host header: name or IP, optional port) names this
/// listener, reached at `local`.
fn host_allowed(host: &str, local: IpAddr, allowed: &[String]) -> bool {
    let name = strip_port(host).to_ascii_lowercase();
    if let Ok(ip) = name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return ip == local || (ip.is_loopback() && local.is_loopback());
    }
    if local.is_loopback() && (name == "localhost" || name.ends_with(".localhost")) {
        return true;
    }
    allowed.iter().any(|pattern| {
        let pattern = pattern.to_ascii_lowercase();
        match pattern.strip_prefix("*.") {
            Some(suffix) => name
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => name == pattern,
        }
    })
}

/// `name:port` -> `name`, `[::1]:9901` -> `[::1]`, `::1` stays.
fn strip_port(host: &str) -> &str {
    if let Some(end) = host.find(']') {
        return &host[..=end];
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Whether `origin` (`http://host[:port]`) is the origin of a page served
/// by this listener under `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some(authority) = origin.strip_prefix("http://") else {
        return false;
    };
    without_default_port(authority).eq_ignore_ascii_case(without_default_port(host))
}

fn without_default_port(authority: &str) -> &str {
    authority.strip_suffix(":80").unwrap_or(authority)
}

/// Origins compare without a trailing slash, case-insensitively.
fn origin_eq(configured: &str, given: &str) -> bool {
    configured
        .trim_end_matches('/')
        .eq_ignore_ascii_case(given.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[test]
    fn hosts_that_name_the_listener() {
        let none: [String; 0] = [];
        for host in [
            "127.0.0.1:9901",
            "127.0.0.1",
            "localhost:9901",
            "LOCALHOST",
            "dash.localhost:9901",
            "[::1]:9901",
            "127.0.0.2:1",
        ] {
            assert!(host_allowed(host, loopback(), &none), "{host}");
        }
        for host in [
            "evil.example:9901",
            "evil.example",
            "10.0.0.5:9901",
            "0.0.0.0:9901",
            "localhost.evil.example",
            "",
        ] {
            assert!(!host_allowed(host, loopback(), &none), "{host}");
        }
        // On a non-loopback address: its own IP and the listed names.
        let local: IpAddr = "10.0.0.5".parse().unwrap();
        let listed = ["gw.internal".to_string(), "*.ops.example".to_string()];
        for host in ["10.0.0.5:9901", "gw.internal", "a.ops.example:9901"] {
            assert!(host_allowed(host, local, &listed), "{host}");
        }
        for host in ["localhost", "127.0.0.1", "ops.example", "x.gw.internal"] {
            assert!(!host_allowed(host, local, &listed), "{host}");
        }
    }

    #[test]
    fn own_origin_and_listed_origins() {
        assert!(same_origin("http://127.0.0.1:9901", "127.0.0.1:9901"));
        assert!(same_origin("http://localhost", "localhost:80"));
        assert!(!same_origin("https://127.0.0.1:9901", "127.0.0.1:9901"));
        assert!(!same_origin("http://127.0.0.1:9902", "127.0.0.1:9901"));
        assert!(!same_origin("null", "127.0.0.1:9901"));
        assert!(origin_eq("https://ops.example/", "https://OPS.example"));
    }

    #[test]
    fn posts_without_a_token_need_intent() {
        let policy = Policy {
            hosts: &[],
            origins: &[],
            token_configured: false,
        };
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (k, v) in pairs {
                headers.insert(*k, HeaderValue::from_static(v));
            }
            check_intent(&policy, &Method::POST, &headers).is_none()
        };
        assert!(!with(&[]));
        assert!(!with(&[("content-type", "text/plain;charset=UTF-8")]));
        assert!(!with(&[(
            "content-type",
            "application/x-www-form-urlencoded"
        )]));
        assert!(!with(&[(
            "content-type",
            "multipart/form-data; boundary=x"
        )]));
        assert!(with(&[("content-type", "application/json")]));
        assert!(with(&[("x-wasmgate-admin", "1")]));
        let token = Policy {
            token_configured: true,
            ..policy
        };
        assert!(check_intent(&token, &Method::POST, &HeaderMap::new()).is_none());
    }
}
