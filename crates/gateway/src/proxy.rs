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
//! Routes without filters skip the Proxy-Wasm work entirely. The response's
//! side of the filtered path is `proxy/response.rs`; the answers and
//! exchanges the path builds, `proxy/answers.rs`. How bytes come in and go
//! out is the `wasmgate-transport` crate's; which node an upstream request
//! goes to, `wasmgate-upstream`'s.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as _;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;
use wasmgate_component::ComponentPlugin;
use wasmgate_proxy_wasm::{Headers, HttpExchange, LocalResponse, RequestInfo, TraceIds};
use wasmgate_transport::body::RequestBody;

use crate::access::{self, logged, Pending};
use crate::body_pump::{channel_body, channel_body_after, BodyPump};
use crate::chain::{Chain, ChainNotes, Direction, Stop};
use crate::endpoint::component;
use crate::endpoint::mirror::{self, Mirror};
use crate::endpoint::tunnel::{self, UpgradeRequest};
use crate::endpoint::upstream::{
    self, exchange_hash_key, path_and_query, request_authority, upstream_head,
};
use crate::endpoint::Target;
use crate::gateway::{Endpoint, Gateway, Route};
use wasmgate_answers::error_response;
use wasmgate_answers::grpc;
use wasmgate_routing::cors;
use wasmgate_routing::router::RouteInput;
use wasmgate_transport::body::{self, Body, ClientBody, ClientBodyError};
use wasmgate_transport::listener::{Connection, Handler};
use wasmgate_upstream::{OutboundBody, Upstream};

mod answers;
mod response;

use answers::{
    exchange_for, keep_gateway_answer, local_response, read_body, route_overloaded, stopped, Asked,
};
use response::filter_whole_body;

/// The rest of a request body still streaming when its response began.
type RequestPump = BodyPump<ClientBody>;

/// Frames in flight between a body pump and its reader.
const BODY_CHANNEL_FRAMES: usize = 8;

impl Handler for Gateway {
    async fn handle(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
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
        mut request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
        let host =
            wasmgate_routing::router::request_host(request.uri(), request.headers()).to_string();
        // The trace, when the node traces, and the access-log line (with a
        // recorded trace's spans), when the node keeps one (access.rs).
        let (trace_ids, mut pending) = access::observe(&mut request, &host, connection.peer);
        let (mut parts, body) = request.into_parts();
        let body = ClientBody::new(
            body,
            Duration::from_millis(self.config.limits.body_read_timeout_ms),
        );
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
        // A body of declared length is being sent now: the receiver hears
        // of the request once the filters have let the first of it through
        // (or its end), so that a request a filter refuses while it buffers
        // the body (a JSON or WAF check) never reaches the upstream, not
        // even its head. A body of open length (a gRPC call, a chunked
        // stream) may not come until the other side has spoken (a stream
        // where the server speaks first): its head goes on as soon as the
        // filters let the headers go, as Envoy's router sends it.
        let head_first = ready.is_some() && open_length(&exchange.request_headers);
        let send = async {
            let first = match head_first {
                true => None,
                false => rx.recv().await,
            };
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
}

/// Whether a request's body has no declared length (no `content-length`):
/// a stream, whose sender may wait for the answer before it sends more.
fn open_length(headers: &Headers) -> bool {
    headers.get(b"content-length").is_none()
}
