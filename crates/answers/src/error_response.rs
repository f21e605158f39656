//! Failed calls as HTTP responses: one status per failure class and a JSON body
//!
//! ```json
//! {"error":{"kind":"trap","message":"...","plugin":"hello","function":"greet","request_id":42,"backtrace":[...]}}
//! ```
//!
//! A crash's report (the engine's message, function names, source files and
//! lines) is the operator's: it goes to the log and the plugin's status
//! (`/plugins/{name}/status`), both naming the request id, and into the
//! answer only with `error_details` on (a development setting; `serve` has
//! it on by default, the gateway off). The answer always names the kind, the
//! plugin and the request id.
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
    status_for_kind(error.kind())
}

/// The status of a failure class (the table above).
pub fn status_for_kind(kind: &str) -> StatusCode {
    match kind {
        "timeout" => StatusCode::GATEWAY_TIMEOUT,
        "overloaded" | "backing_off" | "instantiate_failed" => StatusCode::SERVICE_UNAVAILABLE,
        "function_not_found" => StatusCode::NOT_FOUND,
        "bad_signature" => StatusCode::BAD_REQUEST,
        "input_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The response for a failed call of `function` on `plugin`, made for
/// request `request_id`; the crash report's details only with `details`.
pub fn call_failed(
    plugin: &str,
    function: &str,
    error: &CallError,
    request_id: u64,
    details: bool,
) -> Response<Full<Bytes>> {
    let failure = Failure {
        kind: error.kind(),
        message: error.to_string(),
        crash: error.crash_report(),
        unavailable: match error {
            CallError::Unavailable(e) => Some(e),
            _ => None,
        },
    };
    plugin_failed(plugin, function, failure, request_id, details)
}

/// A failed plugin call, whatever its ABI: what [`plugin_failed`] answers.
pub struct Failure<'a> {
    pub kind: &'a str,
    pub message: String,
    pub crash: Option<&'a wasmgate_runtime::CrashReport>,
    /// Why no instance could be had, if that is the failure.
    pub unavailable: Option<&'a AcquireError>,
}

/// The response for a failed call (an Extism function's, a component's).
pub fn plugin_failed(
    plugin: &str,
    function: &str,
    failure: Failure<'_>,
    request_id: u64,
    details: bool,
) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": failure.kind,
        "message": failure.message,
        "plugin": plugin,
        "function": function,
        "request_id": request_id,
    });
    if let Some(report) = failure.crash {
        if details {
            body["message"] = json!(report.message);
            body["backtrace"] = json!(report.frames);
        } else {
            body["message"] = json!(crash_summary(report, request_id));
        }
    }
    let mut response = json_error(status_for_kind(failure.kind), body);
    let retry_after = match failure.unavailable {
        Some(AcquireError::BackingOff { retry_after, .. }) => Some(retry_after.as_secs().max(1)),
        Some(AcquireError::Overloaded { .. }) => Some(1),
        _ => None,
    };
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(hyper::header::RETRY_AFTER, seconds.into());
    }
    response
}

/// What a client learns of a crash without the details: what failed (the
/// plugin's function or callback, and how) and where the operator finds the
/// report. Nothing of the plugin's code (its own messages, function names,
/// files) is in it.
pub fn crash_summary(report: &wasmgate_runtime::CrashReport, request_id: u64) -> String {
    format!(
        "`{}` of plugin `{}` failed ({}); its crash report is in the gateway's log and GET /plugins/{}/status under request {request_id}",
        report.function,
        report.plugin,
        report.kind.as_str(),
        report.plugin
    )
}

/// A JSON error response with `{"error": body}`, marked as the gateway's
/// own answer (a gRPC client gets it as a gRPC status: `grpc.rs`).
pub fn json_error(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(&json!({ "error": body })).expect("JSON values serialise");
    let made = crate::grpc::GatewayAnswer {
        kind: body["kind"].as_str().unwrap_or("error").to_string(),
        message: body["message"].as_str().unwrap_or_default().to_string(),
        grpc_status: None,
        detail: Some(body),
    };
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .extension(made)
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

/// The gateway's error answers as clients get them without `error_details`:
/// `{"error":{"kind":...,"request_id":...}}` and nothing else (no upstream
/// address, connection error, plugin, registry or etcd endpoint: what
/// failed inside is the operator's). The whole error goes to the log and to
/// `GET /errors/{request_id}` on the admin API, under the id the client got.
/// A response that is not the gateway's own error (an upstream's, a
/// filter's local answer) passes as it is; so does every error with
/// `details` on. The id is the error's own when it names one (a plugin
/// failure's), else `request_id`'s.
pub fn public(
    response: &mut hyper::Response<wasmgate_transport::body::Body>,
    details: bool,
    request_id: impl FnOnce() -> u64,
) {
    let status = response.status();
    let Some(answer) = response
        .extensions_mut()
        .get_mut::<crate::grpc::GatewayAnswer>()
    else {
        return;
    };
    let Some(detail) = &answer.detail else {
        return; // a filter's local response: the filter's own words
    };
    let id = detail["request_id"].as_u64().unwrap_or_else(request_id);
    let mut detail = detail.clone();
    detail["request_id"] = json!(id);
    // What failed was logged where it failed (an upstream, a filter, a
    // crash report), often at `warn`; this line ties it to the id the
    // client holds.
    if status.is_server_error() {
        tracing::info!(request_id = id, status = status.as_u16(), error = %detail, "answered a request with an error");
    } else {
        tracing::debug!(request_id = id, status = status.as_u16(), error = %detail, "answered a request with an error");
    }
    recent_errors::keep(id, status.as_u16(), detail);
    if details {
        return;
    }
    let kind = answer.kind.clone();
    answer.message =
        format!("{kind} (request {id}; the gateway's log and admin API have the details)");
    answer.detail = None;
    let bytes = serde_json::to_vec(&json!({ "error": { "kind": kind, "request_id": id } }))
        .expect("JSON values serialise");
    response.headers_mut().remove(hyper::header::CONTENT_LENGTH);
    *response.body_mut() = wasmgate_transport::body::full(bytes);
}

/// The last errors the gateway answered with, whole, by request id: what
/// `GET /errors/{request_id}` shows operators.
pub mod recent_errors {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// How many are kept (the oldest go first).
    pub const KEPT: usize = 1000;

    static RECENT: Mutex<VecDeque<(u64, u16, serde_json::Value)>> = Mutex::new(VecDeque::new());

    pub(crate) fn keep(request_id: u64, status: u16, error: serde_json::Value) {
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == KEPT {
            recent.pop_front();
        }
        recent.push_back((request_id, status, error));
    }

    /// The error answered to request `request_id` (its status and the
    /// whole error), if it is among the last [`KEPT`].
    pub fn find(request_id: u64) -> Option<(u16, serde_json::Value)> {
        let recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .rev()
            .find(|(id, _, _)| *id == request_id)
            .map(|(_, status, error)| (*status, error.clone()))
    }
}
