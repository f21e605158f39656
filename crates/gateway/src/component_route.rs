//! `wasmgate serve` for a `wasi:http` component: every request (any path,
//! method and header) is the component's, its body streamed both ways, as
//! `wasmtime serve` does. The request path is the gateway's component
//! endpoint (`endpoint/component.rs`) with the access log around it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Full, Limited};
use hyper::{Request, Response, StatusCode};
use wasmgate_component::ComponentPlugin;
use wasmgate_transport::body::RequestBody;

use crate::access::logged;
use crate::endpoint::component;
use crate::function_route::HEALTH_PATH;
use wasmgate_transport::body::{self, Body, ClientBody};
use wasmgate_transport::listener::{Connection, Handler};
use wasmgate_upstream::OutboundBody;

/// A client that stops sending its request body for this long is cut off
/// (the gateway's `limits.body_read_timeout_ms` default).
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ComponentRouteConfig {
    /// Largest request body a component may read (413 when the request
    /// says it is larger; the body ends in an error past it otherwise).
    pub max_body_bytes: usize,
    /// Whether a crash's report goes into the error answer (error_response.rs).
    pub error_details: bool,
}

pub struct ComponentRoute {
    plugin: Arc<ComponentPlugin>,
    config: ComponentRouteConfig,
}

impl ComponentRoute {
    pub fn new(plugin: Arc<ComponentPlugin>, config: ComponentRouteConfig) -> ComponentRoute {
        ComponentRoute { plugin, config }
    }
}

impl Handler for ComponentRoute {
    async fn handle(
        &self,
        mut request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
        if request.uri().path() == HEALTH_PATH {
            return Response::new(body::full(Bytes::from_static(b"ok\n")));
        }
        let limit = self.config.max_body_bytes;
        let declared = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > limit as u64) {
            return body::full_response(too_large(limit));
        }
        let host =
            wasmgate_routing::router::request_host(request.uri(), request.headers()).to_string();
        let pending = match wasmgate_observe::observing() {
            true => crate::access::observe(&mut request, &host, connection.peer).1,
            false => None,
        };
        let (parts, body) = request.into_parts();
        let mut body = ClientBody::new(body, BODY_IDLE_TIMEOUT);
        if let Some(pending) = &pending {
            body = body.counted_into(pending.bytes_in());
        }
        let body = OutboundBody::Streaming(body::boxed(Limited::new(body, limit)));
        let request_id = pending
            .as_ref()
            .map_or_else(crate::request_id::next, |pending| pending.request_id());
        let secure = connection.tls.is_some();
        let head = component::head(parts, &connection, &host);
        let details = self.config.error_details;
        let call = component::answer(&self.plugin, head, body, secure, request_id, details);
        // A traced request's log lines carry its trace id.
        let mut response = match pending.as_ref().and_then(|pending| pending.scope()) {
            Some(scope) => scope.run(Box::pin(call)).await,
            None => call.await,
        };
        wasmgate_answers::error_response::public(&mut response, details, || request_id);
        logged(pending, response)
    }
}

fn too_large(limit: usize) -> Response<Full<Bytes>> {
    wasmgate_answers::error_response::simple(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("request body exceeds the limit of {limit} bytes"),
    )
}
