//! The endpoint of a route whose component is still compiling, or whose
//! filter is still starting with no version before to serve meanwhile
//! (`build/background.rs`): 503 `plugin_starting`, with a `Retry-After`,
//! until the node reloads with the plugin ready.

use hyper::{Response, StatusCode};
use serde_json::json;

use wasmgate_answers::error_response;
use wasmgate_transport::body::{self, Body};

/// How long a client is asked to wait before it tries again.
const RETRY_AFTER_SECONDS: u64 = 2;

/// The answer while `plugin` compiles or starts (since `since_ms`, Unix ms).
pub(crate) fn answer(plugin: &str, since_ms: u64) -> Response<Body> {
    let seconds = wasmgate_base::unix_ms().saturating_sub(since_ms) / 1000;
    let mut response = error_response::json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        json!({
            "kind": "plugin_starting",
            "message": format!("plugin `{plugin}` is still compiling or starting ({seconds} s so far); its routes are served once it is done: try again shortly"),
            "plugin": plugin,
        }),
    );
    response
        .headers_mut()
        .insert(hyper::header::RETRY_AFTER, RETRY_AFTER_SECONDS.into());
    body::full_response(response)
}
