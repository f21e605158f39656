//! The web dashboard (docs/dashboard.md): a page and its script and style,
//! embedded in the binary, served by the admin listener at `/` and `/ui/`.
//! The page reads and changes everything through the admin API like any
//! other client, with the token (when one is configured) in the
//! `Authorization` header, never in a URL or a cookie; so the assets
//! themselves are public and are served before the token check, after the
//! Host and Origin checks.

use bytes::Bytes;
use hyper::{Response, StatusCode};

use wasmgate_gateway::body::{self, Body};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");

/// No inline script or style, nothing from anywhere else, no framing: an
/// injected value can at worst show up as text. Flame graphs are SVG images
/// fetched by the script (`blob:`), which cannot run script as images.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The asset at `path`, if it is one.
pub fn asset(path: &str) -> Option<Response<Body>> {
    let (content_type, text) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/ui/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/ui/app.css" => ("text/css; charset=utf-8", STYLE),
        _ => return None,
    };
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .header(hyper::header::CONTENT_SECURITY_POLICY, CSP)
        .header(hyper::header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(hyper::header::X_FRAME_OPTIONS, "DENY")
        .header(hyper::header::REFERRER_POLICY, "no-referrer")
        .header(hyper::header::CACHE_CONTROL, "no-cache")
        .body(body::full(Bytes::from_static(text.as_bytes())))
        .expect("static response parts are valid");
    Some(response)
}
