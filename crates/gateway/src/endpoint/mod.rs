//! Where a route's requests end: an upstream, an Extism function or a fixed
//! answer. One enum, one file per kind: the request path (`proxy.rs`) asks
//! an endpoint whether it takes the body as a stream (an upstream does) or
//! whole (the others), and hands it over; a new kind of endpoint is a
//! variant and a file here. (An enum, not a trait object: the request path
//! awaits it without boxing a future per request.)

pub(crate) mod function;
pub(crate) mod respond;
pub(crate) mod upstream;

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use wasmgate_config::FixedResponse;

use crate::body::Body;
use crate::upstream::Upstream;

pub(crate) enum Endpoint {
    /// Forwarded, its body streamed (`upstream.rs`).
    Upstream(Arc<Upstream>),
    /// An Extism function called with the whole body (`function.rs`).
    Function(function::Function),
    /// A fixed answer (`respond.rs`).
    Respond(FixedResponse),
}

impl Endpoint {
    /// Answers a request whose (filtered) body is `input`, for the endpoints
    /// that take the body whole; an upstream streams it instead
    /// (`upstream::outbound`, or the chain's pump).
    pub(crate) async fn answer_whole(
        &self,
        path: &str,
        input: Bytes,
        request_id: u64,
        error_details: bool,
    ) -> Response<Body> {
        match self {
            Endpoint::Function(function) => {
                function.call(path, input, request_id, error_details).await
            }
            Endpoint::Respond(fixed) => respond::answer(fixed),
            Endpoint::Upstream(_) => unreachable!("an upstream streams the body"),
        }
    }
}
