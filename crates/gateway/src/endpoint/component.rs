//! The component endpoint: the request (as the filters left it) is handed
//! to a `wasi:http` component, body streaming, and its response comes back
//! streaming too (`wasmgate_component`). The component sees the request as
//! an upstream would: hop-by-hop fields removed, `X-Forwarded-*` set, a
//! `Host`.

use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use wasmgate_component::{ComponentError, ComponentPlugin, Scheme};

use crate::endpoint::upstream::{path_and_query, prepare_upstream_headers, request_authority};
use wasmgate_answers::error_response;
use wasmgate_transport::body::{self, Body};
use wasmgate_transport::listener::Connection;
use wasmgate_upstream::{OutboundBody, RequestHead};

/// The request's head as a component gets it, unfiltered.
pub(crate) fn head(mut parts: Parts, connection: &Connection, host: &str) -> RequestHead {
    let authority = request_authority(&parts).unwrap_or_else(|| host.to_string());
    let secure = connection.tls.is_some();
    prepare_upstream_headers(&mut parts.headers, connection.peer, &authority, secure);
    // `wasi:http` requires an authority: HTTP/2 carries it in the URI, not
    // in a `Host` field.
    if !parts.headers.contains_key(header::HOST) {
        let value = HeaderValue::from_str(&authority)
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        parts.headers.insert(header::HOST, value);
    }
    RequestHead {
        method: parts.method,
        path: path_and_query(&parts.uri),
        headers: parts.headers,
    }
}

/// The component's answer to request `request_id`, or an error answer
/// (error_response.rs) when it gave none.
pub(crate) async fn answer(
    plugin: &ComponentPlugin,
    mut head: RequestHead,
    body: OutboundBody,
    secure: bool,
    request_id: u64,
    error_details: bool,
) -> Response<Body> {
    let body = match body {
        OutboundBody::Replayable(bytes) => body::full(bytes),
        OutboundBody::Streaming(body) => body,
        OutboundBody::Upgrade => body::empty(),
    };
    // A filtered request's `Host` comes from its `:authority`, which a
    // filter may have emptied; `wasi:http` refuses a request without one.
    if head.headers.get(header::HOST).is_none_or(|h| h.is_empty()) {
        head.headers
            .insert(header::HOST, HeaderValue::from_static("localhost"));
    }
    let request = Request::builder()
        .method(head.method)
        .uri(head.path.as_str())
        .body(body);
    let mut request = match request {
        Ok(request) => request,
        Err(e) => {
            return body::full_response(error_response::simple(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the request cannot be given to the component: {e}"),
            ))
        }
    };
    *request.headers_mut() = head.headers;
    let scheme = if secure { Scheme::Https } else { Scheme::Http };
    let call = async {
        match plugin.handle(request, scheme, request_id).await {
            Ok(response) => response.map(body::boxed),
            Err(error) => {
                body::full_response(failed(plugin.name(), &error, request_id, error_details))
            }
        }
    };
    super::function::timed(plugin.name(), "handle", call).await
}

fn failed(
    plugin: &str,
    error: &ComponentError,
    request_id: u64,
    details: bool,
) -> Response<http_body_util::Full<bytes::Bytes>> {
    error_response::plugin_failed(
        plugin,
        "handle",
        error_response::Failure {
            kind: error.kind(),
            message: error.to_string(),
            crash: error.crash_report(),
            unavailable: match error {
                ComponentError::Unavailable(e) => Some(e),
                _ => None,
            },
        },
        request_id,
        details,
    )
}
