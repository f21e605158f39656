//! Failed calls as HTTP responses: one status per failure class and a JSON body
//!
//! ```json
//! {"error":{"kind":"trap","message":"...","plugin":"hello","function":"greet","backtrace":[...]}}
//! ```
//!
//! | kind                                   | status |
//! |----------------------------------------|--------|
//! | plugin_error, plugin_exit              | 500    |
//! | trap, host_error, out_of_memory        | 500    |
//! | timeout                                | 504    |
//! | overloaded, backing_off                | 503 (with Retry-After) |
//! | instantiate_failed                     | 503    |
//! | function_not_found                     | 404    |
//! | bad_signature                          | 400    |
//! | input_too_large, body_too_large        | 413    |

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::json;
use wasmgate_extism::CallError;
use wasmgate_runtime::AcquireError;

pub fn status_for(error: &CallError) -> StatusCode {
    match error.kind() {
        "timeout" => StatusCode::GATEWAY_TIMEOUT,
        "overloaded" | "backing_off" | "instantiate_failed" => StatusCode::SERVICE_UNAVAILABLE,
        "function_not_found" => StatusCode::NOT_FOUND,
        "bad_signature" => StatusCode::BAD_REQUEST,
        "input_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The response for a failed call of `function` on `plugin`.
pub fn call_failed(plugin: &str, function: &str, error: &CallError) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": error.kind(),
        "message": error.to_string(),
        "plugin": plugin,
        "function": function,
    });
    if let Some(report) = error.crash_report() {
        body["message"] = json!(report.message);
        body["backtrace"] = json!(report.frames);
    }
    let mut response = json_error(status_for(error), body);
    let retry_after = match error {
        CallError::Unavailable(AcquireError::BackingOff { retry_after, .. }) => {
            Some(retry_after.as_secs().max(1))
        }
        CallError::Unavailable(AcquireError::Overloaded { .. }) => Some(1),
        _ => None,
    };
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(hyper::header::RETRY_AFTER, seconds.into());
    }
    response
}

/// A JSON error response with `{"error": body}`.
pub fn json_error(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(&json!({ "error": body })).expect("JSON values serialise");
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .expect("static response parts are valid")
}

/// An error of `serve` before the call (no such function, a body too large
/// or malformed): as a call's, with the plugin and the function it was for
/// (`null` when the path named none).
pub fn before_call(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
    plugin: &str,
    function: Option<&str>,
) -> Response<Full<Bytes>> {
    json_error(
        status,
        json!({ "kind": kind, "message": message.into(), "plugin": plugin, "function": function }),
    )
}

/// An error that is not a plugin call's (bad request, body too large, ...).
pub fn simple(status: StatusCode, kind: &str, message: impl Into<String>) -> Response<Full<Bytes>> {
    json_error(status, json!({ "kind": kind, "message": message.into() }))
}
