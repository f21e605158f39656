//! What the request path builds its answers and exchanges from: the
//! request as it came ([`Asked`]), the exchange filters see, and the
//! gateway's own answers (a stopped chain, an overloaded route, a filter's
//! local reply, a body over its limit).

use super::*;

/// A request as it came: its head, its connection, the host it names, and
/// what the access log set up for it (its id, the chain's notes).
pub(super) struct Asked {
    pub(super) parts: Parts,
    pub(super) connection: Connection,
    pub(super) host: String,
    pub(super) request_id: Option<u64>,
    pub(super) notes: Option<Arc<ChainNotes>>,
    pub(super) trace: Option<Box<TraceIds>>,
}

/// The exchange filters see: pseudo-headers, then the request's own header
/// map (`Host` becomes `:authority`), and what is known of the request and
/// its connection.
pub(super) fn exchange_for(asked: Asked, route: &Route) -> Box<HttpExchange> {
    let Asked {
        parts,
        connection,
        host,
        request_id,
        trace,
        ..
    } = asked;
    let authority = request_authority(&parts).unwrap_or(host);
    let mut fields = parts.headers;
    fields.remove(header::HOST);
    let mut request_headers = Headers::from_map(fields);
    request_headers.push_pseudo(":method", parts.method.as_str().as_bytes().to_vec());
    request_headers.push_pseudo(":path", path_and_query(&parts.uri).into_bytes());
    request_headers.push_pseudo(":authority", authority.into_bytes());
    let scheme: &'static [u8] = if connection.tls.is_some() {
        b"https"
    } else {
        b"http"
    };
    request_headers.push_pseudo(":scheme", scheme);
    let protocol = match parts.version {
        hyper::Version::HTTP_2 => "HTTP/2",
        hyper::Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let cluster = match &route.endpoint {
        Endpoint::Upstream(upstream) => Some(upstream.facts.clone()),
        _ => None,
    };
    // Filled in place: built whole, the exchange (about a kilobyte) would
    // be written on the stack, then copied into its box.
    let mut exchange = Box::<HttpExchange>::default();
    exchange.request_headers = request_headers;
    exchange.info = RequestInfo {
        id: request_id.unwrap_or_else(crate::request_id::next),
        protocol,
        start_time: Some(SystemTime::now()),
        source: Some(connection.peer),
        destination: Some(connection.local),
        connection_id: connection.id,
        cluster,
        upstream_sent: false,
        upstream_node: None,
        request_body_bytes: 0,
        response_body_bytes: 0,
        complete: false,
        tls: connection.tls,
        trace,
    };
    exchange
}

/// The response for a request the chain stopped; a crash's report (or any
/// failure's inner message) only with `details` (`error_details`).
pub(super) fn stopped(
    route: &str,
    stop: Stop,
    exchange: &mut HttpExchange,
    details: bool,
) -> Response<Body> {
    match stop {
        Stop::Respond => {
            let local = exchange
                .local_response
                .take()
                .expect("Respond means a local response was recorded");
            let grpc = (exchange.request_headers.get(b"content-type"))
                .is_some_and(|v| v.starts_with(b"application/grpc"));
            local_response(local, grpc)
        }
        Stop::Closed { plugin } => body::full_response(error_response::json_error(
            StatusCode::BAD_GATEWAY,
            json!({"kind": "stream_closed", "plugin": plugin, "route": route,
                   "message": "the filter closed the stream"}),
        )),
        Stop::ClientBody { status, message } => {
            tracing::info!(%route, %message, "request failed on the client's body");
            body::full_response(error_response::simple(status, "client_body", message))
        }
        Stop::TooLarge { limit } => body::full_response(error_response::simple(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body a filter buffers exceeds limits.max_body_bytes ({limit} bytes)"),
        )),
        Stop::Failed { plugin, error } => {
            let (status, kind) = match &error {
                wasmgate_proxy_wasm::FilterError::Unavailable { .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, "filter_unavailable")
                }
                wasmgate_proxy_wasm::FilterError::Crash(report)
                    if report.kind.as_str() == "timeout" =>
                {
                    (StatusCode::GATEWAY_TIMEOUT, "filter_timeout")
                }
                // Paused (waiting on its http calls) past its limit: a timeout too.
                wasmgate_proxy_wasm::FilterError::PausedTooLong { .. } => {
                    (StatusCode::GATEWAY_TIMEOUT, "filter_timeout")
                }
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "filter_failed"),
            };
            let request_id = exchange.info.id;
            tracing::warn!(%route, %plugin, request_id, %error, "filter failed; failing the request closed");
            let message = match &error {
                wasmgate_proxy_wasm::FilterError::Crash(report) if !details => {
                    error_response::crash_summary(report, request_id)
                }
                error => error.to_string(),
            };
            let mut response = error_response::json_error(
                status,
                json!({"kind": kind, "plugin": plugin, "route": route, "request_id": request_id, "message": message}),
            );
            if status == StatusCode::SERVICE_UNAVAILABLE {
                // Busy or backing off: worth trying again shortly.
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            body::full_response(response)
        }
    }
}

/// 503 for a request over its route's `max_concurrent_requests`.
pub(super) fn route_overloaded(route: &str) -> Response<Body> {
    let mut response = error_response::simple(
        StatusCode::SERVICE_UNAVAILABLE,
        "route_overloaded",
        format!("route `{route}` is serving its max_concurrent_requests; retry later"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    body::full_response(response)
}

/// `made` back on the filtered response, unless a filter answered itself.
pub(super) fn keep_gateway_answer(
    mut response: Response<Body>,
    made: Option<grpc::GatewayAnswer>,
) -> Response<Body> {
    if let Some(made) = made {
        if response.extensions().get::<grpc::GatewayAnswer>().is_none() {
            response.extensions_mut().insert(made);
        }
    }
    response
}

/// A filter's local response. For a gRPC request it is marked as the
/// gateway's own answer, which `grpc::answer` turns into a gRPC status (only
/// then: the mark costs two allocations an ordinary request need not pay).
pub(super) fn local_response(local: LocalResponse, grpc: bool) -> Response<Body> {
    let status =
        StatusCode::from_u16(local.status as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(body::full(local.body));
    *response.status_mut() = status;
    let mut headers = local.headers;
    *response.headers_mut() = headers.take_map();
    if grpc {
        let message = match local.details.is_empty() {
            true => format!("refused by a filter ({status})"),
            false => local.details,
        };
        response
            .extensions_mut()
            .insert(wasmgate_answers::grpc::GatewayAnswer {
                kind: "local".into(),
                message,
                grpc_status: local.grpc_status,
                detail: None,
            });
    }
    response
}

pub(super) async fn read_body(body: ClientBody, limit: usize) -> Result<Bytes, Response<Body>> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(body::full_response(error_response::simple(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body exceeds the limit of {limit} bytes"),
            )))
        }
        Err(e) => {
            let status = ClientBodyError::find(&*e).map_or(StatusCode::BAD_REQUEST, |e| e.status());
            Err(body::full_response(error_response::simple(
                status,
                "client_body",
                format!("reading the request body failed: {e}"),
            )))
        }
    }
}
