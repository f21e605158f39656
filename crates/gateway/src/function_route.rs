//! A route whose endpoint is an Extism function: the request body is the
//! input, the output is the response body. The whole request path of
//! `wasmgate serve` is [`FunctionRoute::handle`].

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use wasmgate_extism::Plugin;
use wasmgate_transport::body::RequestBody;

use crate::access::{logged, Pending};
use wasmgate_answers::error_response;
use wasmgate_transport::body::{self, Body};
use wasmgate_transport::listener::{Connection, Handler};

/// The path load balancers and Kubernetes probes ask `wasmgate serve`
/// whether it is up (200 `ok`), reserved the way Spin reserves
/// `/.well-known/spin/health`: a function's name never starts with a dot
/// and holds no `/`, so no plugin loses a function to it.
pub const HEALTH_PATH: &str = "/.well-known/wasmgate/health";

#[derive(Clone, Debug)]
pub struct FunctionRouteConfig {
    /// Function called for `/`; other paths name the function (`/count_vowels`).
    pub default_function: Option<String>,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Content-Type of successful responses; `None` guesses JSON / text / binary.
    pub content_type: Option<String>,
    /// Whether a crash's report (message, backtrace with files and lines)
    /// goes into the error answer, not only the log (error_response.rs).
    pub error_details: bool,
}

impl Default for FunctionRouteConfig {
    fn default() -> Self {
        FunctionRouteConfig {
            default_function: None,
            max_body_bytes: 16 * 1024 * 1024,
            content_type: None,
            error_details: false,
        }
    }
}

pub struct FunctionRoute {
    plugin: Arc<Plugin>,
    config: FunctionRouteConfig,
}

impl FunctionRoute {
    pub fn new(plugin: Arc<Plugin>, config: FunctionRouteConfig) -> FunctionRoute {
        FunctionRoute { plugin, config }
    }

    /// Which function a path names: `/` is the default function, `/name` is `name`.
    fn function_for<'a>(&'a self, path: &'a str) -> Option<&'a str> {
        match path.trim_start_matches('/') {
            "" => self.config.default_function.as_deref(),
            name => Some(name.trim_end_matches('/')),
        }
    }

    pub async fn handle(&self, request: Request<RequestBody>) -> Response<Full<Bytes>> {
        self.handle_noted(request, None).await
    }

    /// [`FunctionRoute::handle`], telling `pending` (an access-log line)
    /// the function called and the bytes of the input.
    async fn handle_noted(
        &self,
        request: Request<RequestBody>,
        mut pending: Option<&mut Pending>,
    ) -> Response<Full<Bytes>> {
        if request.uri().path() == HEALTH_PATH {
            return Response::new(Full::new(Bytes::from_static(b"ok\n")));
        }
        let function = self.function_for(request.uri().path()).map(str::to_string);
        if let (Some(pending), Some(function)) = (pending.as_mut(), &function) {
            pending.set_route(&function.as_str().into());
        }
        let Some(function) = function else {
            return error_response::before_call(
                StatusCode::NOT_FOUND,
                "function_not_found",
                "no default function: call /<function>",
                self.plugin.name(),
                None,
            );
        };
        match read_body(request.into_body(), self.config.max_body_bytes).await {
            Ok(body) => {
                let Some(pending) = pending else {
                    let request_id = crate::request_id::next();
                    return self.call(request_id, &function, &body).await;
                };
                pending.read(body.len() as u64);
                let call = self.call(pending.request_id(), &function, &body);
                let call = crate::endpoint::function::timed(self.plugin.name(), &function, call);
                // A traced call's log lines carry its trace id, its service
                // calls become spans.
                match pending.scope() {
                    Some(scope) => scope.run(Box::pin(call)).await,
                    None => call.await,
                }
            }
            Err((status, kind, message)) => error_response::before_call(
                status,
                kind,
                message,
                self.plugin.name(),
                Some(&function),
            ),
        }
    }

    /// Calls `function` with `input` for request `request_id`: its output,
    /// or the error as a response.
    pub async fn call(
        &self,
        request_id: u64,
        function: &str,
        input: &[u8],
    ) -> Response<Full<Bytes>> {
        match self
            .plugin
            .call_in_request(request_id, function, input)
            .await
        {
            Ok(output) => self.success(output),
            Err(error) => error_response::call_failed(
                self.plugin.name(),
                function,
                &error,
                request_id,
                self.config.error_details,
            ),
        }
    }

    fn success(&self, output: Vec<u8>) -> Response<Full<Bytes>> {
        let content_type = match &self.config.content_type {
            Some(ct) => ct.as_str(),
            None => guess_content_type(&output),
        };
        Response::builder()
            .status(StatusCode::OK)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(output)))
            .expect("static response parts are valid")
    }
}

impl Handler for FunctionRoute {
    async fn handle(
        &self,
        mut request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
        let details = self.config.error_details;
        if !wasmgate_observe::observing() {
            let mut response = FunctionRoute::handle(self, request).await.map(body::boxed);
            error_response::public(&mut response, details, crate::request_id::next);
            return response;
        }
        let host =
            wasmgate_routing::router::request_host(request.uri(), request.headers()).to_string();
        let (_, mut pending) = crate::access::observe(&mut request, &host, connection.peer);
        let mut response = self
            .handle_noted(request, pending.as_deref_mut())
            .await
            .map(body::boxed);
        error_response::public(&mut response, details, || {
            pending
                .as_ref()
                .map_or_else(crate::request_id::next, |p| p.request_id())
        });
        logged(pending, response)
    }
}

/// The body, or why not: (status, error kind, message).
async fn read_body(
    body: RequestBody,
    limit: usize,
) -> Result<Bytes, (StatusCode, &'static str, String)> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body exceeds the limit of {limit} bytes"),
        )),
        Err(e) => Err((
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("reading the request body failed: {e}"),
        )),
    }
}

/// JSON when the output looks like a JSON object or array, text when it is
/// UTF-8, bytes otherwise. The check is cheap: one byte and a UTF-8 scan.
fn guess_content_type(output: &[u8]) -> &'static str {
    match std::str::from_utf8(output) {
        Ok(text) if text.trim_start().starts_with(['{', '[']) => "application/json",
        Ok(_) => "text/plain; charset=utf-8",
        Err(_) => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_guess() {
        assert_eq!(guess_content_type(br#"{"a":1}"#), "application/json");
        assert_eq!(guess_content_type(b"  [1]"), "application/json");
        assert_eq!(guess_content_type(b"hello"), "text/plain; charset=utf-8");
        assert_eq!(
            guess_content_type(&[0xff, 0xfe]),
            "application/octet-stream"
        );
    }
}
