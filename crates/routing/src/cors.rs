//! Cross-origin requests (CORS) a route allows: a browser's preflight
//! (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from an
//! allowed origin is answered here, without reaching the endpoint; the
//! answer to an allowed origin's request gets `Access-Control-Allow-Origin`
//! and the rest. A request from another origin, or without one, is left as
//! it is (the browser, not the gateway, withholds the answer).
//! The rules for `*` with credentials are the Fetch standard's, as the
//! Gateway API's CORS filter states them.

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Response, StatusCode};

use wasmgate_config::CorsConfig;

use wasmgate_transport::body::{self, Body};

const ALLOW_ORIGIN: HeaderName = HeaderName::from_static("access-control-allow-origin");
const ALLOW_CREDENTIALS: HeaderName = HeaderName::from_static("access-control-allow-credentials");
const ALLOW_METHODS: HeaderName = HeaderName::from_static("access-control-allow-methods");
const ALLOW_HEADERS: HeaderName = HeaderName::from_static("access-control-allow-headers");
const EXPOSE_HEADERS: HeaderName = HeaderName::from_static("access-control-expose-headers");
const MAX_AGE: HeaderName = HeaderName::from_static("access-control-max-age");
const REQUEST_METHOD: &str = "access-control-request-method";
const REQUEST_HEADERS: &str = "access-control-request-headers";

/// A route's CORS policy, its header values made once.
pub struct Cors {
    origins: Vec<Origin>,
    /// `*` among the origins.
    any_origin: bool,
    /// `*` among the methods / headers: any.
    any_method: bool,
    any_header: bool,
    methods: Option<HeaderValue>,
    headers: Option<HeaderValue>,
    expose: Option<HeaderValue>,
    max_age: HeaderValue,
    credentials: bool,
}

/// An allowed origin other than `*`.
enum Origin {
    Exact(String),
    /// `https://*.example.com` as (`https://`, `.example.com`).
    Wildcard(String, String),
}

/// What a cross-origin request from an allowed origin gets.
pub enum Verdict {
    /// A preflight, answered here.
    Preflight(Response<Body>),
    /// Headers the route's answer carries.
    Answer(HeaderMap),
}

impl Cors {
    /// Values were checked with the configuration.
    pub fn new(config: &CorsConfig) -> Cors {
        let list = |items: &[String]| {
            let listed: Vec<&str> = items
                .iter()
                .map(String::as_str)
                .filter(|i| *i != "*")
                .collect();
            (!listed.is_empty()).then(|| value(&listed.join(", ")))
        };
        Cors {
            any_origin: config.allow_origins.iter().any(|o| o == "*"),
            origins: (config.allow_origins.iter())
                .filter(|o| *o != "*")
                .map(|o| match o.split_once("*.") {
                    Some((scheme, rest)) => Origin::Wildcard(
                        scheme.to_ascii_lowercase(),
                        format!(".{}", rest.to_ascii_lowercase()),
                    ),
                    None => Origin::Exact(o.to_ascii_lowercase()),
                })
                .collect(),
            any_method: config.allow_methods.iter().any(|m| m == "*"),
            any_header: config.allow_headers.iter().any(|h| h == "*"),
            methods: list(&config.allow_methods),
            headers: list(&config.allow_headers),
            expose: list(&config.expose_headers),
            max_age: HeaderValue::from(config.max_age_seconds),
            credentials: config.allow_credentials,
        }
    }

    /// None: no `Origin`, or one this route does not allow.
    pub fn judge(&self, method: &Method, request: &HeaderMap) -> Option<Verdict> {
        let origin = request.get(hyper::header::ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        let allowed = self.any_origin
            || self.origins.iter().any(|o| match o {
                Origin::Exact(exact) => *exact == text,
                Origin::Wildcard(scheme, suffix) => (text.strip_prefix(scheme.as_str()))
                    .is_some_and(|host| {
                        host.len() > suffix.len() && host.ends_with(suffix.as_str())
                    }),
            });
        if !allowed {
            return None;
        }
        let mut headers = HeaderMap::new();
        // `*` only when no credentials go with the request (Fetch).
        let echo = !self.any_origin || self.credentials;
        headers.insert(
            ALLOW_ORIGIN,
            if echo {
                origin.clone()
            } else {
                HeaderValue::from_static("*")
            },
        );
        if echo {
            headers.append(hyper::header::VARY, HeaderValue::from_static("Origin"));
        }
        if self.credentials {
            headers.insert(ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
        }
        let preflight = method == Method::OPTIONS && request.contains_key(REQUEST_METHOD);
        if !preflight {
            if let Some(expose) = &self.expose {
                headers.insert(EXPOSE_HEADERS, expose.clone());
            }
            return Some(Verdict::Answer(headers));
        }
        let wildcard = |any: bool, listed: &Option<HeaderValue>, asked: Option<&HeaderValue>| match (
            any,
            self.credentials,
        ) {
            (true, false) => Some(HeaderValue::from_static("*")),
            // With credentials `*` is a name, not a wildcard: say what was asked.
            (true, true) => asked.cloned(),
            (false, _) => listed.clone(),
        };
        if let Some(methods) = wildcard(self.any_method, &self.methods, request.get(REQUEST_METHOD))
        {
            headers.insert(ALLOW_METHODS, methods);
        }
        if let Some(allowed) =
            wildcard(self.any_header, &self.headers, request.get(REQUEST_HEADERS))
        {
            headers.insert(ALLOW_HEADERS, allowed);
        }
        headers.insert(MAX_AGE, self.max_age.clone());
        let mut response = Response::new(body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.headers_mut() = headers;
        Some(Verdict::Preflight(response))
    }
}

fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("header values checked with the configuration")
}

/// The answer's CORS headers, replacing any of the same names the
/// endpoint set (`Vary` is added to, not replaced).
pub fn add(response: &mut HeaderMap, cors: HeaderMap) {
    for (name, value) in cors.iter() {
        if name == hyper::header::VARY {
            response.append(name, value.clone());
        } else {
            response.insert(name, value.clone());
        }
    }
}
