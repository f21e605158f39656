//! Where a route's requests end: an upstream, an Extism function, a
//! `wasi:http` component, a fixed answer or a redirect (or, while a
//! component compiles, a 503 that says so). One enum, one file
//! per kind: the request path (`proxy.rs`) asks an endpoint whether it takes
//! the body as a stream (an upstream and a component do) or whole (the
//! others), and hands it over; a new kind of endpoint is a
//! variant and a file here. (An enum, not a trait object: the request path
//! awaits it without boxing a future per request.)

pub(crate) mod component;
pub(crate) mod function;
pub(crate) mod mirror;
pub(crate) mod redirect;
pub(crate) mod respond;
pub(crate) mod starting;
pub(crate) mod tunnel;
pub(crate) mod upstream;

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use wasmgate_config::{FixedResponse, Redirect};

use wasmgate_transport::body::Body;
use wasmgate_upstream::Upstream;

pub(crate) enum Endpoint {
    /// Forwarded, its body streamed (`upstream.rs`).
    Upstream(Arc<Upstream>),
    /// An Extism function called with the whole body (`function.rs`).
    Function(function::Function),
    /// A `wasi:http` component, the body streamed (`component.rs`).
    Component(Arc<wasmgate_component::ComponentPlugin>),
    /// A fixed answer (`respond.rs`).
    Respond(FixedResponse),
    /// A redirect to the request's URL changed (`redirect.rs`).
    Redirect(Redirect),
    /// A component still compiling: 503 until the node reloads with it
    /// (`starting.rs`); the plugin's name and since when (Unix ms).
    Starting(String, u64),
}

/// Where a request was going, as the filters left it: what the endpoints
/// that take the body whole may read of it.
pub(crate) struct Target<'a> {
    pub scheme: &'a str,
    /// The host, with or without its port.
    pub authority: &'a str,
    pub path_and_query: &'a str,
}

impl Endpoint {
    /// Answers a request whose (filtered) body is `input`, for the endpoints
    /// that take the body whole; an upstream streams it instead
    /// (`upstream::outbound`, or the chain's pump).
    pub(crate) async fn answer_whole(
        &self,
        target: &Target<'_>,
        input: Bytes,
        request_id: u64,
        error_details: bool,
    ) -> Response<Body> {
        match self {
            Endpoint::Function(function) => {
                let path = target.path_and_query.split('?').next().unwrap_or_default();
                function.call(path, input, request_id, error_details).await
            }
            Endpoint::Respond(fixed) => respond::answer(fixed),
            Endpoint::Redirect(redirect) => redirect::answer(redirect, target),
            Endpoint::Starting(plugin, since_ms) => starting::answer(plugin, *since_ms),
            Endpoint::Upstream(_) | Endpoint::Component(_) => {
                unreachable!("upstreams and components stream the body")
            }
        }
    }
}
