//! The gateway's request path, in the order a request takes it:
//!
//! 1. match a route (404 when none does);
//! 2. apply the route's own request header and URL changes (and answer a
//!    CORS preflight it allows, `cors.rs`), start its filter chain and run
//!    `on_request_headers`;
//! 3. send the request to the endpoint (`endpoint/`: an upstream, with
//!    copies to the route's mirrors (`endpoint/mirror.rs`), or a
//!    `wasi:http` component, which take the body as it streams through
//!    `on_request_body`, or an Extism function or fixed answer, which take
//!    it whole);
//! 4. run `on_response_headers`, then stream the response body through
//!    `on_response_body` after the headers have gone out;
//! 5. the route's own response header changes (and an allowed origin's
//!    CORS headers) go onto every response it gives, then `on_log` /
//!    `on_done` once the response body is over;
//! 6. the access-log line (`access.rs`), when the node keeps a log and the
//!    route wants one: begun with the request, queued when the response
//!    body ends.
//!
//! An upgrade request (WebSocket) the route tunnels takes steps 1-4 with its
//! headers only; after the node's `101` its connection becomes a tunnel to
//! the node's (`endpoint/tunnel.rs`), and `on_log` runs once the `101` is
//! sent. A local response from a filter ends the chain and skips the endpoint.
//! Routes without filters skip the Proxy-Wasm work entirely. How bytes come
//! in and go out is `transport/`'s; which node an upstream request goes to,
//! `upstream/`'s.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;
use wasmgate_component::ComponentPlugin;
use wasmgate_proxy_wasm::{Headers, HttpExchange, LocalResponse, RequestInfo, TraceIds};

use crate::access::{self, logged, Pending};
use crate::body::{self, Body, ClientBody, ClientBodyError};
use crate::body_pump::{channel_body, channel_body_after, BodyPump};
use crate::chain::{Chain, ChainNotes, Direction, Stop};
use crate::cors;
use crate::endpoint::component;
use crate::endpoint::mirror::{self, Mirror};
use crate::endpoint::tunnel::{self, UpgradeRequest};
use crate::endpoint::upstream::{
    self, exchange_hash_key, path_and_query, request_authority, upstream_head,
};
use crate::endpoint::Target;
use crate::error_response;
use crate::gateway::{Endpoint, Gateway, Route};
use crate::grpc;
use crate::router::RouteInput;
use crate::transport::listener::{Connection, Handler};
use crate::upstream::{OutboundBody, Upstream};

/// The rest of a request body still streaming when its response began.
type RequestPump = BodyPump<ClientBody>;

/// Frames in flight between a body pump and its reader.
const BODY_CHANNEL_FRAMES: usize = 8;

impl Handler for Gateway {
    async fn handle(&self, request: Request<Incoming>, connection: Connection) -> Response<Body> {
        // gRPC is HTTP/2 only: an HTTP/1.1 request skips the header lookup.
        if request.version() != hyper::Version::HTTP_2 || !grpc::is_grpc(request.headers()) {
            return self.route_request(request, connection).await;
        }
        // A gRPC call: its deadline kept, the gateway's own answers made
        // gRPC statuses (grpc.rs).
        let Some(timeout) = grpc::timeout(request.headers()) else {
            return grpc::answer(self.route_request(request, connection).await);
        };
        let deadline = tokio::time::Instant::now() + timeout;
        match tokio::time::timeout_at(deadline, self.route_request(request, connection)).await {
            Ok(response) => grpc::answer(response.map(|b| grpc::DeadlineBody::wrap(b, deadline))),
            Err(_) => grpc::deadline_exceeded(timeout),
        }
    }
}

impl Gateway {
    /// Steps 1-5 above for one request.
    async fn route_request(
        &self,
        request: Request<Incoming>,
        connection: Connection,
    ) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let body = ClientBody::new(
            body,
            Duration::from_millis(self.config.limits.body_read_timeout_ms),
        );
        let host = crate::router::request_host(&parts.uri, &parts.headers).to_string();
        // The trace, when the node traces, and the access-log line (with a
        // recorded trace's spans), when the node keeps one (access.rs).
        let (trace_ids, mut pending) = access::observe(&mut parts, &host, connection.peer);
        let body = match &pending {
            Some(pending) => body.counted_into(pending.bytes_in()),
            None => body,
        };
        let route = self
            .route_index
            .find(
                &self.routes,
                &RouteInput {
                    host: &host,
                    path: parts.uri.path(),
                    query: parts.uri.query(),
                    method: &parts.method,
                    headers: &parts.headers,
                    tls: connection.tls.is_some(),
                    port: connection.local.port(),
                },
            )
            .map(|i| &self.routes[i]);
        let Some(route) = route else {
            let response = body::full_response(error_response::simple(
                StatusCode::NOT_FOUND,
                "no_route",
                format!(
                    "no route matches {} {}{}",
                    parts.method,
                    host,
                    parts.uri.path()
                ),
            ));
            return self.answered(pending, response);
        };
        if !route.access_log {
            pending = pending.and_then(Pending::without_log);
        }
        if let Some(edits) = &route.request_headers {
            edits.apply(&mut parts.headers);
        }
        if let Some(rewrite) = &route.rewrite {
            rewrite.apply(&mut parts);
        }
        // A cross-origin request the route allows (cors.rs): its preflight
        // is answered here; its answer gets the headers at the end.
        let cors = match route
            .cors
            .as_ref()
            .and_then(|c| c.judge(&parts.method, &parts.headers))
        {
            Some(cors::Verdict::Preflight(mut response)) => {
                if let Some(edits) = &route.response_headers {
                    edits.apply(response.headers_mut());
                }
                route.count(response.status());
                return self.answered(pending, response);
            }
            Some(cors::Verdict::Answer(headers)) => Some(headers),
            None => None,
        };
        let mut notes = None;
        if let Some(pending) = &mut pending {
            pending.set_route(&route.name);
            if !route.filters.is_empty() {
                let chain_notes = ChainNotes::new(&route.filter_names);
                pending.notes(chain_notes.clone());
                notes = Some(chain_notes);
            }
        }
        let request_id = pending.as_ref().map(|pending| pending.request_id());
        let permit = match &route.concurrency {
            None => None,
            Some(limit) => match limit.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    route.rejected.fetch_add(1, Ordering::Relaxed);
                    route.count(StatusCode::SERVICE_UNAVAILABLE);
                    return self.answered(pending, route_overloaded(&route.name));
                }
            },
        };
        // The request's clock, read once: the log's when it keeps one.
        let started = pending
            .as_ref()
            .map_or_else(std::time::Instant::now, |pending| pending.started());
        let upgrade = match &route.endpoint {
            Endpoint::Upstream(upstream) => {
                tunnel::requested(&mut parts, &route.upgrade).map(|upgrade| (upstream, upgrade))
            }
            _ => None,
        };
        // A traced request's log lines carry its trace id, and its service
        // calls become spans (access.rs).
        let scope = pending.as_ref().and_then(|pending| pending.scope());
        let asked = Asked {
            parts,
            connection,
            host,
            request_id,
            notes,
            trace: trace_ids,
        };
        let mut response = match scope {
            None => match upgrade {
                Some((upstream, upgrade)) => self.upgrade(route, upstream, upgrade, asked).await,
                None if route.filters.is_empty() => self.unfiltered(route, asked, body).await,
                None => self.filtered(route, asked, body).await,
            },
            // Boxed, so the scope's wrappers hold a pointer: moved into each
            // of them, the handling future (tens of kilobytes) cost a
            // request 300,000 instructions of memcpy (bench/instructions.sh).
            Some(scope) => {
                let handling = Box::pin(async move {
                    match upgrade {
                        Some((upstream, upgrade)) => {
                            self.upgrade(route, upstream, upgrade, asked).await
                        }
                        None if route.filters.is_empty() => {
                            self.unfiltered(route, asked, body).await
                        }
                        None => self.filtered(route, asked, body).await,
                    }
                });
                scope.run(handling).await
            }
        };
        if let Some(edits) = &route.response_headers {
            edits.apply(response.headers_mut());
        }
        if let Some(headers) = cors {
            cors::add(response.headers_mut(), headers);
        }
        route.latency.record(started.elapsed());
        route.count(response.status());
        let response = self.answered(pending, response);
        match permit {
            // The request counts against the limit until its body is sent.
            Some(permit) => response.map(|body| {
                body.map_frame(move |frame| {
                    let _held = &permit;
                    frame
                })
                .boxed_unsync()
            }),
            None => response,
        }
    }

    /// The response as the client gets it: the gateway's own error answers
    /// reduced to their kind and request id (`error_response::public`), and
    /// its access-log line begun.
    fn answered(
        &self,
        pending: Option<Box<Pending>>,
        mut response: Response<Body>,
    ) -> Response<Body> {
        error_response::public(&mut response, self.config.error_details, || {
            pending
                .as_ref()
                .map_or_else(crate::request_id::next, |p| p.request_id())
        });
        logged(pending, response)
    }

    /// The fast path: no filter, so no exchange to build.
    async fn unfiltered(&self, route: &Route, asked: Asked, body: ClientBody) -> Response<Body> {
        let Asked {
            parts,
            connection,
            host,
            request_id,
            ..
        } = asked;
        let (connection, host) = (&connection, host.as_str());
        match &route.endpoint {
            Endpoint::Upstream(upstream) => {
                let (head, mut outbound, key) =
                    upstream::outbound(upstream, parts, body, connection, host);
                if !route.mirrors.is_empty() {
                    outbound = mirror::copy(&route.mirrors, &head, outbound);
                }
                match upstream.send(head, outbound, key).await {
                    Ok(response) => upstream::answer(response),
                    Err(e) => upstream::upstream_failed(&route.name, e),
                }
            }
            Endpoint::Component(plugin) => {
                let secure = connection.tls.is_some();
                let head = component::head(parts, connection, host);
                let request_id = request_id.unwrap_or_else(crate::request_id::next);
                let body = OutboundBody::Streaming(body::boxed(body));
                let details = self.config.error_details;
                component::answer(plugin, head, body, secure, request_id, details).await
            }
            // Nothing to read the body for: a component still compiling.
            Endpoint::Starting(plugin, since_ms) => {
                crate::endpoint::starting::answer(plugin, *since_ms)
            }
            endpoint => {
                let input = match read_body(body, self.config.limits.max_body_bytes).await {
                    Ok(input) => input,
                    Err(response) => return response,
                };
                let request_id = request_id.unwrap_or_else(crate::request_id::next);
                let target = Target {
                    scheme: if connection.tls.is_some() {
                        "https"
                    } else {
                        "http"
                    },
                    // Without its port (a redirect names its own).
                    authority: host,
                    path_and_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
                };
                endpoint
                    .answer_whole(&target, input, request_id, self.config.error_details)
                    .await
            }
        }
    }

    async fn filtered(&self, route: &Route, asked: Asked, body: ClientBody) -> Response<Body> {
        let peer = asked.connection.peer;
        let notes = asked.notes.clone();
        let mut exchange = exchange_for(asked, route);
        let mut chain = match Chain::start(&route.filters, notes.clone()).await {
            Ok(chain) => chain,
            Err(stop) => {
                return stopped(&route.name, stop, &mut exchange, self.config.error_details)
            }
        };
        let request_ends = body.is_end_stream();
        if let Err(stop) = chain
            .headers(Direction::Request, &mut exchange, request_ends)
            .await
        {
            let response = self
                .request_stopped(route, stop, &mut chain, &mut exchange)
                .await;
            chain.finish(&mut exchange).await;
            return response;
        }
        let limit = self.config.limits.max_body_bytes;
        let sent: Result<(Response<Body>, Option<RequestPump>), Stop> = match &route.endpoint {
            Endpoint::Upstream(upstream) => {
                self.send_upstream(
                    upstream,
                    &route.mirrors,
                    &mut chain,
                    &mut exchange,
                    body,
                    peer,
                )
                .await
            }
            Endpoint::Component(plugin) => {
                self.send_component(plugin, &mut chain, &mut exchange, body, peer, request_ends)
                    .await
            }
            endpoint => {
                // Functions and fixed answers take the whole (filtered) body.
                let input = if request_ends {
                    Ok(Bytes::new())
                } else {
                    filter_whole_body(&mut chain, &mut exchange, body, limit).await
                };
                match input {
                    Ok(input) => {
                        let pseudo = |name: &[u8]| {
                            let value = exchange.request_headers.get(name).unwrap_or_default();
                            String::from_utf8_lossy(value)
                        };
                        // Read only what the endpoint uses: a fixed answer
                        // nothing, a function the path, a redirect all three.
                        let (scheme, authority, path) = match endpoint {
                            Endpoint::Respond(_) => Default::default(),
                            Endpoint::Function(_) => {
                                (Default::default(), Default::default(), pseudo(b":path"))
                            }
                            _ => (pseudo(b":scheme"), pseudo(b":authority"), pseudo(b":path")),
                        };
                        let target = Target {
                            scheme: &scheme,
                            authority: &authority,
                            path_and_query: &path,
                        };
                        let request_id = exchange.info.id;
                        let details = self.config.error_details;
                        let answer = endpoint
                            .answer_whole(&target, input, request_id, details)
                            .await;
                        // Envoy's words: a route's own answer is a direct
                        // response; a function answers as an upstream would.
                        exchange.response_details = Some(match endpoint {
                            Endpoint::Function(_) => "via_upstream".into(),
                            _ => "direct_response".into(),
                        });
                        Ok((answer, None))
                    }
                    Err(stop) => Err(stop),
                }
            }
        };
        let (mut response, request_rest) = match sent {
            Ok(sent) => {
                if let Some(notes) = &notes {
                    notes.note_endpoint(&sent.0);
                }
                // A component answers as an upstream would.
                if exchange.response_details.is_none() {
                    exchange.response_details = Some("via_upstream".into());
                }
                sent
            }
            Err(stop) => {
                let response = self
                    .request_stopped(route, stop, &mut chain, &mut exchange)
                    .await;
                chain.finish(&mut exchange).await;
                return response;
            }
        };
        // The gateway's own answer (an upstream failure) stays marked as
        // such through the filters, so that a gRPC client still gets it as a
        // gRPC status and the log its kind, unless a filter answered instead.
        // Only an error can be the gateway's: a success skips the lookup.
        let made = match response.status().is_success() {
            true => None,
            false => response.extensions_mut().remove::<grpc::GatewayAnswer>(),
        };
        let filtered = self
            .filter_response(route, chain, exchange, response, request_rest)
            .await;
        keep_gateway_answer(filtered, made)
    }

    /// Sends the filtered request upstream (`send_streaming`).
    async fn send_upstream(
        &self,
        upstream: &Upstream,
        mirrors: &[Arc<Mirror>],
        chain: &mut Chain,
        exchange: &mut Box<HttpExchange>,
        body: ClientBody,
        peer: SocketAddr,
    ) -> Result<(Response<Body>, Option<RequestPump>), Stop> {
        let request_ends = body.is_end_stream();
        let prepare = |exchange: &HttpExchange| {
            let head = upstream_head(exchange, peer);
            (head, exchange_hash_key(upstream, exchange, peer))
        };
        let send = |(head, key), body| {
            let body = if mirrors.is_empty() {
                body
            } else {
                mirror::copy(mirrors, &head, body)
            };
            upstream.send(head, body, key)
        };
        let (result, rest) = self
            .send_streaming(chain, exchange, body, request_ends, prepare, send)
            .await?;
        match result {
            Ok(response) => {
                exchange.response_details = Some("via_upstream".into());
                Ok((upstream::answer(response), rest))
            }
            Err(e) => {
                if let Some(pump) = rest {
                    pump.abandon();
                }
                exchange.response_details = Some(upstream::code_details(&e).into());
                tracing::warn!(upstream = %upstream.name, error = %e, "upstream request failed");
                Ok((upstream::upstream_error_response(e), None))
            }
        }
    }

    /// Hands the filtered request to a component (`send_streaming`).
    async fn send_component(
        &self,
        plugin: &ComponentPlugin,
        chain: &mut Chain,
        exchange: &mut Box<HttpExchange>,
        body: ClientBody,
        peer: SocketAddr,
        request_ends: bool,
    ) -> Result<(Response<Body>, Option<RequestPump>), Stop> {
        let secure = exchange.info.tls.is_some();
        let (request_id, details) = (exchange.info.id, self.config.error_details);
        let prepare = |exchange: &HttpExchange| upstream_head(exchange, peer);
        let send = |head, body| component::answer(plugin, head, body, secure, request_id, details);
        self.send_streaming(chain, exchange, body, request_ends, prepare, send)
            .await
    }

    /// Sends the filtered request on with `send`, its body pumped through
    /// the chain while the receiver reads it. `prepare` makes what `send`
    /// needs of the request's head once the headers are final: at once,
    /// or, when a filter holds them while it reads the body (Envoy's
    /// StopIteration), once it lets them go, with what it changed. When the
    /// receiver answers before the request body is over (a bidirectional
    /// stream), the rest of the request body comes back with the answer, to
    /// be pumped beside the response body (`filter_response`).
    async fn send_streaming<P, T, Sent>(
        &self,
        chain: &mut Chain,
        exchange: &mut Box<HttpExchange>,
        body: ClientBody,
        request_ends: bool,
        prepare: impl Fn(&HttpExchange) -> P,
        send: impl FnOnce(P, OutboundBody) -> Sent,
    ) -> Result<(T, Option<RequestPump>), Stop>
    where
        Sent: std::future::Future<Output = T>,
    {
        if request_ends {
            let body = OutboundBody::Replayable(Bytes::new());
            return Ok((send(prepare(exchange), body).await, None));
        }
        let (tx, mut rx) = mpsc::channel(BODY_CHANNEL_FRAMES);
        let limit = self.config.limits.max_body_bytes;
        let mut pump = Some(BodyPump::new(Direction::Request, body, tx, limit));
        // The head, now if the headers are final; else it comes through
        // `held_head` once they are (a channel only then: most requests
        // have no filter that holds their headers).
        let (ready, mut held_head, head_later) = if chain.headers_stopped(Direction::Request) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            (None, Some(tx), Some(rx))
        } else {
            (Some(prepare(exchange)), None, None)
        };
        // The receiver hears of the request once the filters have let the
        // first of its body through (or its end): a request a filter
        // refuses while it buffers the body (a JSON or WAF check) never
        // reaches the upstream, not even its head.
        let send = async {
            let first = rx.recv().await;
            let prepared = match (ready, head_later) {
                (Some(prepared), _) => prepared,
                (None, Some(later)) => later.await.expect("the head is sent before the body ends"),
                (None, None) => unreachable!("a head now or later"),
            };
            send(
                prepared,
                OutboundBody::Streaming(channel_body_after(first, rx)),
            )
            .await
        };
        let mut send = std::pin::pin!(send);
        loop {
            tokio::select! {
                biased;
                result = &mut send => return Ok((result, pump)),
                next = async {
                    match pump.as_mut() {
                        Some(pump) => pump.next_when_room().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let body = pump.as_mut().expect("only polled while there");
                    let fed = chain.feed(body, exchange, next).await;
                    // The headers let go (or the body over): the head as
                    // the filters left it.
                    let ended = matches!(fed, Ok(true));
                    if held_head.is_some() && (ended || !chain.headers_stopped(Direction::Request)) {
                        let _ = held_head.take().expect("checked").send(prepare(exchange));
                    }
                    match fed {
                        // Dropping the sink ends the body the receiver reads.
                        Ok(true) => pump = None,
                        Ok(false) => {}
                        Err(stop) => {
                            // The request sent on, if it started, is
                            // aborted: its body will not be complete.
                            if let Some(pump) = pump {
                                pump.abort("stopped by a filter").await;
                            }
                            return Err(stop);
                        }
                    }
                }
            }
        }
    }

    /// An upgrade request: its headers through the chain, then to the
    /// upstream on a connection of its own; the node's answer through the
    /// chain, and after a `101` the tunnel (`tunnel::answer`).
    async fn upgrade(
        &self,
        route: &Route,
        upstream: &Upstream,
        upgrade: UpgradeRequest,
        asked: Asked,
    ) -> Response<Body> {
        // An upgrade request has no body of its own: what follows its head
        // is the tunnel's.
        if route.filters.is_empty() {
            let Asked {
                parts,
                connection,
                host,
                ..
            } = asked;
            let (mut head, key) = upstream::outbound_head(upstream, parts, &connection, &host);
            tunnel::ask_upstream(&mut head.headers, &upgrade.protocol);
            return match upstream.send(head, OutboundBody::Upgrade, key).await {
                Ok(response) => tunnel::answer(upgrade, response, &route.name, &route.upgrade),
                Err(e) => upstream::upstream_failed(&route.name, e),
            };
        }
        let peer = asked.connection.peer;
        let notes = asked.notes.clone();
        let mut exchange = exchange_for(asked, route);
        let mut chain = match Chain::start(&route.filters, notes.clone()).await {
            Ok(chain) => chain,
            Err(stop) => {
                return stopped(&route.name, stop, &mut exchange, self.config.error_details)
            }
        };
        if let Err(stop) = chain.headers(Direction::Request, &mut exchange, true).await {
            let response = self
                .request_stopped(route, stop, &mut chain, &mut exchange)
                .await;
            chain.finish(&mut exchange).await;
            return response;
        }
        let mut head = upstream_head(&exchange, peer);
        tunnel::ask_upstream(&mut head.headers, &upgrade.protocol);
        let key = exchange_hash_key(upstream, &exchange, peer);
        let response = match upstream.send(head, OutboundBody::Upgrade, key).await {
            Ok(response) => {
                if let Some(notes) = &notes {
                    notes.note_endpoint(&response);
                }
                tunnel::answer(upgrade, response, &route.name, &route.upgrade)
            }
            Err(e) => upstream::upstream_failed(&route.name, e),
        };
        self.filter_response(route, chain, exchange, response, None)
            .await
    }

    /// Response headers through the chain; the body is filtered as it
    /// streams, beside the rest of the request body if that is still coming.
    async fn filter_response(
        &self,
        route: &Route,
        mut chain: Chain,
        mut exchange: Box<HttpExchange>,
        response: Response<Body>,
        request_rest: Option<RequestPump>,
    ) -> Response<Body> {
        let (parts, body) = response.into_parts();
        let mut response_headers = Headers::from_map(parts.headers);
        response_headers.push_pseudo(":status", parts.status.as_str().as_bytes().to_vec());
        exchange.response_headers = response_headers;
        let response_ends = body.is_end_stream();
        if let Err(stop) = chain
            .headers(Direction::Response, &mut exchange, response_ends)
            .await
        {
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
        let status = response_status(&exchange, parts.status);
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
        let mut body = body;
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
    async fn filter_held_response(
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
        let status = response_status(&exchange, status);
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
    async fn request_stopped(
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
        let grpc = (exchange.request_headers.get(b"content-type"))
            .is_some_and(|v| v.starts_with(b"application/grpc"));
        local_response(replied, grpc)
    }
}

/// The status the filters left in `:status`, else `status`.
fn response_status(exchange: &HttpExchange, status: StatusCode) -> StatusCode {
    (exchange.response_headers.get(b":status"))
        .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(status)
}

/// Collects the request body through the chain's body callbacks.
async fn filter_whole_body(
    chain: &mut Chain,
    exchange: &mut Box<HttpExchange>,
    body: ClientBody,
    limit: usize,
) -> Result<Bytes, Stop> {
    let (tx, mut rx) = mpsc::channel::<Result<hyper::body::Frame<Bytes>, crate::body::BoxError>>(
        BODY_CHANNEL_FRAMES,
    );
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

/// The exchange filters see: pseudo-headers, then the request's own header
/// map (`Host` becomes `:authority`), and what is known of the request and
/// its connection.
/// A request as it came: its head, its connection, the host it names, and
/// what the access log set up for it (its id, the chain's notes).
struct Asked {
    parts: Parts,
    connection: Connection,
    host: String,
    request_id: Option<u64>,
    notes: Option<Arc<ChainNotes>>,
    trace: Option<Box<TraceIds>>,
}

fn exchange_for(asked: Asked, route: &Route) -> Box<HttpExchange> {
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
        Endpoint::Upstream(upstream) => Some(upstream.cluster_name.clone()),
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
        tls: connection.tls,
        trace,
    };
    exchange
}

/// The response for a request the chain stopped; a crash's report (or any
/// failure's inner message) only with `details` (`error_details`).
fn stopped(route: &str, stop: Stop, exchange: &mut HttpExchange, details: bool) -> Response<Body> {
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
fn route_overloaded(route: &str) -> Response<Body> {
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
fn keep_gateway_answer(
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
fn local_response(local: LocalResponse, grpc: bool) -> Response<Body> {
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
            .insert(crate::grpc::GatewayAnswer {
                kind: "local".into(),
                message,
                grpc_status: local.grpc_status,
                detail: None,
            });
    }
    response
}

async fn read_body(body: ClientBody, limit: usize) -> Result<Bytes, Response<Body>> {
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
