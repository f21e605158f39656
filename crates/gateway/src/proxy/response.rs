//! The response's side of the filtered path (steps 4 and 5 of `proxy.rs`):
//! response headers and body through the chain, a response whose headers a
//! filter holds while it reads the body, and the answer to a request the
//! chain stopped before its response began.

use super::*;
use hyper::body::Frame;
use wasmgate_upstream::UpstreamServed;

use crate::chain::WholeResponse;

impl Gateway {
    /// Response headers through the chain; the body is filtered as it
    /// streams, beside the rest of the request body if that is still coming.
    pub(super) async fn filter_response(
        &self,
        route: &Route,
        mut chain: Chain,
        mut exchange: Box<HttpExchange>,
        response: Response<Body>,
        request_rest: Option<RequestPump>,
    ) -> Response<Body> {
        let (parts, body) = response.into_parts();
        // What `upstream.address` reads: the request went to the upstream,
        // and to which node when the upstream said (it does only while
        // requests are observed: the extension is an allocation).
        if let Endpoint::Upstream(_) = &route.endpoint {
            exchange.info.upstream_sent = true;
            if let Some(served) = parts.extensions.get::<UpstreamServed>() {
                exchange.info.upstream_node = Some(served.node.clone());
            }
        }
        let mut response_headers = Headers::from_map(parts.headers);
        response_headers.push_pseudo(":status", parts.status.as_str().as_bytes().to_vec());
        exchange.response_headers = response_headers;
        let response_ends = body.is_end_stream();
        let mut body = body;
        // A body already here whole, through a route of one filter: its
        // callbacks in one guest call as far as they go on (batch.rs).
        let mut headers_done = false;
        if request_rest.is_none() && !response_ends && chain.takes_whole_responses() {
            let (whole, rest) = whole_now(body);
            body = rest;
            if let Some(data) = whole {
                match chain.response_whole(&mut exchange, data.to_vec()).await {
                    Err(stop) => {
                        let response =
                            stopped(&route.name, stop, &mut exchange, self.config.error_details);
                        chain.finish(&mut exchange).await;
                        return response;
                    }
                    // The headers went through and the body waits: on as usual.
                    Ok(WholeResponse::Headers(data)) => {
                        body = body::prepended(Ok(Frame::data(Bytes::from(data))), body);
                        headers_done = true;
                    }
                    Ok(WholeResponse::Body(out) | WholeResponse::Ended(out)) => {
                        chain.finish(&mut exchange).await;
                        let status = sent_status(&exchange, parts.status);
                        let builder = Response::builder().status(status);
                        let mut response = builder.body(body::full(out)).expect("valid parts");
                        let mut headers = exchange.response_headers.take_sent();
                        // Filters may change the body's length: let the framing follow.
                        headers.remove(header::CONTENT_LENGTH);
                        *response.headers_mut() = headers;
                        return response;
                    }
                }
            }
        }
        let headers = match headers_done {
            true => Ok(()),
            false => (chain.headers(Direction::Response, &mut exchange, response_ends)).await,
        };
        if let Err(stop) = headers {
            if let Some(pump) = request_rest {
                pump.abandon();
            }
            let response = stopped(&route.name, stop, &mut exchange, self.config.error_details);
            chain.finish(&mut exchange).await;
            return response;
        }
        if chain.headers_stopped(Direction::Response) && !response_ends {
            return self
                .filter_held_response(route, chain, exchange, parts.status, body, request_rest)
                .await;
        }
        let status = sent_status(&exchange, parts.status);
        let builder = Response::builder().status(status);
        // The headers are final once `on_response_headers` is over; the
        // exchange keeps them for the filters' later reads (`proxy_on_log`)
        // and gives them to the response after the last callback, copied
        // only if a filter edits them in between (headers.rs).
        exchange.response_headers.freeze();
        let sent_headers = |exchange: &mut HttpExchange| {
            let mut headers = exchange.response_headers.take_sent();
            // Filters may change the body's length: let the framing follow.
            headers.remove(header::CONTENT_LENGTH);
            headers
        };
        if response_ends {
            if let Some(pump) = request_rest {
                pump.abandon();
            }
            chain.finish(&mut exchange).await;
            let mut response = builder.body(body::empty()).expect("valid parts");
            *response.headers_mut() = exchange.response_headers.take_sent();
            return response;
        }
        // Most bodies come whole in their first frame: filter those here and
        // answer with the result, which is cheaper than a streaming task and
        // lets a filter still replace the response.
        // Not while the request still streams: its next frame may be what
        // the upstream waits for before it sends one.
        let first = match request_rest {
            None => body.frame().await,
            Some(_) => None,
        };
        let mut ended = body.is_end_stream();
        if request_rest.is_none() && !ended && first.as_ref().is_some_and(|f| f.is_ok()) {
            // A body without a size (chunked, a component's) often has its
            // end right behind its first frame: look, without waiting.
            match body::peek(&mut body) {
                body::Peeked::Ended => ended = true,
                body::Peeked::Next(frame) => body = body::prepended(frame, body),
                body::Peeked::NotYet => {}
            }
        }
        if request_rest.is_none() && ended {
            if let Some(data) = first.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()) {
                let data = data.to_vec();
                let filtered = chain
                    .body_chunk(Direction::Response, &mut exchange, data, true)
                    .await;
                let filtered = filtered.map_err(|stop| {
                    stopped(&route.name, stop, &mut exchange, self.config.error_details)
                });
                chain.finish(&mut exchange).await;
                return match filtered {
                    Ok(out) => {
                        let mut response = builder.body(body::full(out)).expect("valid parts");
                        *response.headers_mut() = sent_headers(&mut exchange);
                        response
                    }
                    Err(response) => response,
                };
            }
        }
        // Streamed: the headers go out now, a copy (filters read them on).
        let mut headers = exchange.response_headers.map().clone();
        headers.remove(header::CONTENT_LENGTH);
        let mut builder = builder;
        *builder.headers_mut().expect("fresh builder") = headers;
        let (tx, rx) = mpsc::channel(BODY_CHANNEL_FRAMES);
        let limit = self.config.limits.max_body_bytes;
        let route_name = route.name.clone();
        tokio::spawn(async move {
            let response = BodyPump::new(Direction::Response, body, tx, limit);
            let pumped = match request_rest {
                None => chain.pump(&mut exchange, response, first).await,
                Some(request) => chain.duplex(&mut exchange, request, response).await,
            };
            // Headers are gone: all that is left was to abort the body (the
            // pump did; the client sees a truncated response, never a wrong
            // one).
            match pumped {
                Ok(()) => {}
                Err(Stop::TooLarge { limit }) => tracing::warn!(
                    route = %route_name,
                    limit,
                    "a filter buffered more of a body than limits.max_body_bytes; aborting the response"
                ),
                Err(stop) => {
                    tracing::warn!(route = %route_name, ?stop, "a filter stopped a body; aborting the response")
                }
            }
            chain.finish(&mut exchange).await;
        });
        builder.body(channel_body(rx)).expect("valid parts")
    }
}

impl Gateway {
    /// A response whose headers a filter holds while it reads the body
    /// (Envoy's StopIteration in `proxy_on_response_headers`): the body goes
    /// through the chain until the filter lets the headers go, and the
    /// head sent is the one the filters left; the rest streams on. The
    /// request's body, if still coming, waits until then.
    pub(super) async fn filter_held_response(
        &self,
        route: &Route,
        mut chain: Chain,
        mut exchange: Box<HttpExchange>,
        status: StatusCode,
        body: Body,
        request_rest: Option<RequestPump>,
    ) -> Response<Body> {
        let (tx, rx) = mpsc::channel(BODY_CHANNEL_FRAMES);
        let limit = self.config.limits.max_body_bytes;
        let mut pump = BodyPump::new(Direction::Response, body, tx, limit);
        let mut ended = false;
        while chain.headers_stopped(Direction::Response) && !ended {
            let next = pump.next().await;
            match chain.feed(&mut pump, &mut exchange, next).await {
                Ok(done) => ended = done,
                Err(stop) => {
                    if let Some(request) = request_rest {
                        request.abandon();
                    }
                    let response =
                        stopped(&route.name, stop, &mut exchange, self.config.error_details);
                    chain.finish(&mut exchange).await;
                    return response;
                }
            }
        }
        let status = sent_status(&exchange, status);
        let mut headers = exchange.response_headers.map().clone();
        // Filters may change the body's length: let the framing follow.
        headers.remove(header::CONTENT_LENGTH);
        let mut response = Response::new(channel_body(rx));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        if ended {
            // The whole body is in the channel; dropping the pump ends it.
            drop(pump);
            if let Some(request) = request_rest {
                request.abandon();
            }
            chain.finish(&mut exchange).await;
            return response;
        }
        let route_name = route.name.clone();
        tokio::spawn(async move {
            let pumped = match request_rest {
                None => chain.pump(&mut exchange, pump, None).await,
                Some(request) => chain.duplex(&mut exchange, request, pump).await,
            };
            if let Err(stop) = pumped {
                tracing::warn!(route = %route_name, ?stop, "a filter stopped a body; aborting the response");
            }
            chain.finish(&mut exchange).await;
        });
        response
    }
}

impl Gateway {
    /// The response for a request the chain stopped before its response
    /// began. A filter's local reply goes through the filters' response
    /// callbacks first, as Envoy sends it through its encoder filters
    /// (`Chain::local_reply`), and says its details in
    /// `response.code_details`.
    pub(super) async fn request_stopped(
        &self,
        route: &Route,
        stop: Stop,
        chain: &mut Chain,
        exchange: &mut Box<HttpExchange>,
    ) -> Response<Body> {
        let local = match stop {
            Stop::Respond => exchange.local_response.take(),
            _ => None,
        };
        let Some(local) = local else {
            return stopped(&route.name, stop, exchange, self.config.error_details);
        };
        let LocalResponse {
            status,
            details,
            mut headers,
            body,
            grpc_status,
        } = local;
        headers.push_pseudo(":status", status.to_string().into_bytes());
        exchange.response_headers = headers;
        exchange.response_body = body;
        exchange.response_details = Some(match details.is_empty() {
            true => "local_reply".into(),
            false => details.clone().into(),
        });
        chain.local_reply(exchange).await;
        let status = (exchange.response_headers.get(b":status"))
            .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u32>().ok())
            .unwrap_or(status);
        let replied = LocalResponse {
            status,
            details,
            headers: std::mem::take(&mut exchange.response_headers),
            body: std::mem::take(&mut exchange.response_body),
            grpc_status,
        };
        exchange.info.response_body_bytes = replied.body.len() as u64;
        let grpc = (exchange.request_headers.get(b"content-type"))
            .is_some_and(|v| v.starts_with(b"application/grpc"));
        local_response(replied, grpc)
    }
}

/// The status the filters left in `:status`, else `status`.
/// The status the filters left in `:status` when the response's headers
/// went out (an edit after that reaches no client, headers.rs).
fn sent_status(exchange: &HttpExchange, status: StatusCode) -> StatusCode {
    (exchange.response_headers.sent_pseudo(b":status"))
        .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(status)
}

/// Collects the request body through the chain's body callbacks.
pub(super) async fn filter_whole_body(
    chain: &mut Chain,
    exchange: &mut Box<HttpExchange>,
    body: ClientBody,
    limit: usize,
) -> Result<Bytes, Stop> {
    let (tx, mut rx) = mpsc::channel::<
        Result<hyper::body::Frame<Bytes>, wasmgate_transport::body::BoxError>,
    >(BODY_CHANNEL_FRAMES);
    let collect = async {
        let mut out = Vec::new();
        while let Some(Ok(frame)) = rx.recv().await {
            if let Ok(data) = frame.into_data() {
                out.extend_from_slice(&data);
            }
        }
        out
    };
    let pump = chain.pump(
        exchange,
        BodyPump::new(Direction::Request, body, tx, limit),
        None,
    );
    let (out, pumped) = tokio::join!(collect, pump);
    pumped?;
    Ok(Bytes::from(out))
}

/// The whole body if it is already here, one data frame and its end
/// (most small answers, and every local `respond`), without waiting; the
/// body as it was otherwise.
fn whole_now(mut body: Body) -> (Option<Bytes>, Body) {
    match body::peek(&mut body) {
        body::Peeked::Next(Ok(frame)) if frame.is_data() => {
            let data = frame.into_data().unwrap_or_default();
            match body::peek(&mut body) {
                body::Peeked::Ended => (Some(data), body),
                body::Peeked::Next(next) => {
                    let rest = body::prepended(next, body);
                    (None, body::prepended(Ok(Frame::data(data)), rest))
                }
                body::Peeked::NotYet => (None, body::prepended(Ok(Frame::data(data)), body)),
            }
        }
        body::Peeked::Next(other) => (None, body::prepended(other, body)),
        // Over before a frame: an empty body, as the usual path has it.
        body::Peeked::Ended => (None, body::empty()),
        body::Peeked::NotYet => (None, body),
    }
}
