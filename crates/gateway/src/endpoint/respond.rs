//! The fixed-answer endpoint (`respond:`): a status, headers and a body
//! from the configuration.

use hyper::{Response, StatusCode};
use wasmgate_config::FixedResponse;

use wasmgate_answers::error_response;
use wasmgate_transport::body::{self, Body};

/// The route's fixed answer.
pub(crate) fn answer(fixed: &FixedResponse) -> Response<Body> {
    let mut builder = Response::builder().status(fixed.status);
    for (k, v) in &fixed.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder
        .body(body::full(fixed.body.clone()))
        .unwrap_or_else(|_| {
            body::full_response(error_response::simple(
                StatusCode::INTERNAL_SERVER_ERROR,
                "bad_fixed_response",
                "the route's fixed response has an invalid header",
            ))
        })
}
