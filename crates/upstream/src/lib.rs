//! Upstreams (Envoy's clusters): weighted nodes and how a request reaches
//! one. Sending is here (a node picked by `balance`, its pooled
//! connections in `wasmgate_transport::node_pool`, another node tried
//! after a failure); which nodes are in rotation is `health`'s (active
//! probes, passive ejection). Filters' HTTP calls reach these upstreams
//! through the gateway's `http_call.rs`, which is the only part that knows
//! the filter ABI.

mod balance;
mod health;

pub use balance::hash;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderValue, HOST};
use hyper::http::uri::PathAndQuery;
use hyper::{HeaderMap, Method, Request, Response, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;

use wasmgate_base::histogram::LatencyHistogram;
use wasmgate_base::upstream_facts::UpstreamFacts;

use wasmgate_config::{Balance, HashOn, PassiveCheck, UpstreamConfig, UpstreamProtocol};
use wasmgate_transport::body::{self, Body, ClientBodyError};
use wasmgate_transport::connector::CountedConnector;
use wasmgate_transport::node_pool::{NodePool, NodeTls, PooledBody, ReadTimedOut};
use wasmgate_transport::tls_client::{self, UpstreamTlsError};

/// Idle keep-alive connections per node, and how long one may stay idle.
const MAX_IDLE_PER_NODE: usize = 256;
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Upstream {
    pub name: Arc<str>,
    /// What Proxy-Wasm filters read of it (`cluster_name` in the form
    /// Envoy and Higress give it, `outbound|<port>||<name>` with the port of
    /// the first node, which Higress's `_match_service_` rules parse; its
    /// nodes). Shared with every filtered request's exchange.
    pub facts: Arc<UpstreamFacts>,
    nodes: Vec<Node>,
    balance: Balance,
    pub hash_on: HashOn,
    pub hash_header: Option<String>,
    /// Smooth weighted round robin's running weights (nginx's algorithm).
    current_weights: Mutex<Vec<i64>>,
    /// (point, node index), sorted by point.
    ring: Vec<(u64, usize)>,
    read_timeout: Duration,
    retries: u32,
    passive: Option<PassiveCheck>,
}

/// Which node answered a request, and how long its response head took:
/// put in the response's extensions for the access log (only while one is
/// kept: the extension map is an allocation per response).
#[derive(Clone, Debug)]
pub struct UpstreamServed {
    pub node: Arc<str>,
    /// When the request went to the node, and how long its answer's head took.
    pub sent_at: Instant,
    pub elapsed: Duration,
}

pub struct Node {
    pub address: String,
    /// The same, shared with the responses it answers (`UpstreamServed`).
    shared_address: Arc<str>,
    /// `Host` for requests that bring none (probes, calls without `:authority`).
    default_host: Option<HeaderValue>,
    /// Its keep-alive connections.
    pool: Arc<NodePool>,
    weight: u32,
    /// Cleared by active probes.
    healthy: AtomicBool,
    probe_streak: AtomicU32,
    /// Consecutive failed requests (passive check).
    failures: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    /// Requests sent to this node still waiting for its response headers.
    pub waiting: AtomicU64,
    /// Connections open to this node (in use or idle in the pool).
    pub connections: Arc<AtomicU64>,
    /// Time from sending a request to its response headers.
    pub latency: LatencyHistogram,
}

/// What goes upstream besides the body.
#[derive(Clone)]
pub struct RequestHead {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub headers: HeaderMap,
}

/// A body that can be sent again (retries) or only once; or none, for an
/// upgrade request (WebSocket), which goes on a connection of its own that
/// becomes a tunnel after the node's `101`.
pub enum OutboundBody {
    Replayable(Bytes),
    Streaming(Body),
    Upgrade,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream `{upstream}`: no node could be reached ({attempts} tried): {last}")]
    Unreachable {
        upstream: String,
        attempts: u32,
        last: String,
    },
    /// The TLS handshake with the last node tried failed (its certificate
    /// did not verify, say).
    #[error("upstream `{upstream}`: {message}")]
    Tls { upstream: String, message: String },
    #[error("upstream `{upstream}` node {node} sent no response headers within {timeout:?}")]
    Timeout {
        upstream: String,
        node: String,
        timeout: Duration,
    },
    /// The request failed because of the client's body (stalled or
    /// malformed), not the upstream's doing.
    #[error("{message}")]
    ClientBody {
        status: hyper::StatusCode,
        message: String,
    },
}

/// `outbound|<port>||<name>`: see [`Upstream::facts`].
fn cluster_name(config: &UpstreamConfig) -> String {
    let port = config
        .nodes
        .first()
        .and_then(|n| n.address.rsplit_once(':'))
        .map_or("", |(_, port)| port);
    format!("outbound|{port}||{}", config.name)
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Upstream({})", self.name)
    }
}

impl Upstream {
    /// The upstream of `config` (its TLS files relative to `base`); fails
    /// when its TLS settings do not load.
    pub fn new(config: &UpstreamConfig, base: &std::path::Path) -> Result<Arc<Upstream>, String> {
        let tls = match &config.tls {
            Some(tls) => {
                let requests = tls_client::alpn(config.protocol);
                let upgrades = tls_client::alpn(UpstreamProtocol::Http1);
                let clients = (
                    tls_client::client_config(tls, base, requests)?,
                    tls_client::client_config(tls, base, upgrades)?,
                );
                Some((clients, tls))
            }
            None => None,
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(config.connect_timeout_ms)));
        connector.set_nodelay(true);
        let gauges: wasmgate_transport::connector::ConnectionGauges = Arc::new(
            config
                .nodes
                .iter()
                .map(|n| (n.address.clone(), Arc::default()))
                .collect(),
        );
        let connector = CountedConnector::new(connector, gauges.clone());
        let addresses: Vec<Arc<str>> = config
            .nodes
            .iter()
            .map(|n| n.address.as_str().into())
            .collect();
        let nodes: Vec<Node> = config
            .nodes
            .iter()
            .zip(&addresses)
            .map(|(n, shared_address)| {
                let tls = match &tls {
                    Some(((requests, upgrades), settings)) => Some(NodeTls {
                        requests: tls_client::for_node(requests, settings, &n.address)?,
                        upgrades: tls_client::for_node(upgrades, settings, &n.address)?,
                    }),
                    None => None,
                };
                Ok(Node {
                    address: n.address.clone(),
                    shared_address: shared_address.clone(),
                    default_host: HeaderValue::from_str(&n.address).ok(),
                    pool: NodePool::new(
                        &n.address,
                        connector.clone(),
                        config.protocol,
                        tls,
                        MAX_IDLE_PER_NODE,
                        IDLE_TIMEOUT,
                    ),
                    weight: n.weight.max(1),
                    healthy: AtomicBool::new(true),
                    probe_streak: AtomicU32::new(0),
                    failures: AtomicU32::new(0),
                    ejected_until: Mutex::new(None),
                    requests: AtomicU64::new(0),
                    retries: AtomicU64::new(0),
                    waiting: AtomicU64::new(0),
                    connections: gauges[&n.address].clone(),
                    latency: LatencyHistogram::default(),
                })
            })
            .collect::<Result<_, String>>()?;
        // Only consistent hashing reads the ring, and it costs memory and a
        // sort in proportion to the weights.
        let ring = match config.balance {
            Balance::ConsistentHash => balance::ring(&nodes),
            _ => Vec::new(),
        };
        let upstream = Arc::new(Upstream {
            name: config.name.as_str().into(),
            facts: Arc::new(UpstreamFacts {
                cluster_name: cluster_name(config),
                nodes: addresses,
            }),
            current_weights: Mutex::new(vec![0; nodes.len()]),
            nodes,
            balance: config.balance,
            hash_on: config.hash_on,
            hash_header: config.hash_header.clone(),
            ring,
            read_timeout: Duration::from_millis(config.read_timeout_ms),
            retries: config.retries,
            passive: config.health_check.passive.clone(),
        });
        if let Some(active) = &config.health_check.active {
            tokio::spawn(health::probe_forever(
                Arc::downgrade(&upstream),
                active.clone(),
            ));
        }
        tokio::spawn(close_idle_forever(Arc::downgrade(&upstream)));
        Ok(upstream)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Sends the request, trying further nodes on connection failures (and,
    /// when the body can be replayed, on any failure before a response).
    pub async fn send(
        &self,
        mut head: RequestHead,
        body: OutboundBody,
        key: Option<u64>,
    ) -> Result<Response<PooledBody>, UpstreamError> {
        let mut tried = Vec::new();
        let mut body = Some(body);
        // Whether a streamed request body has been sent whole (a replayable
        // one is always sent with the request).
        let mut body_sent = Arc::new(AtomicBool::new(true));
        let mut last = String::from("no nodes");
        // Whether the last failure was a TLS handshake (answered apart).
        let mut last_was_tls = false;
        let mut refused_before = false;
        while tried.len() <= self.retries as usize {
            let Some(i) = self.pick(key, &tried) else {
                break;
            };
            let node = &self.nodes[i];
            if !tried.is_empty() {
                node.retries.fetch_add(1, Ordering::Relaxed);
            }
            tried.push(i);
            node.requests.fetch_add(1, Ordering::Relaxed);
            let upgrade = matches!(body, Some(OutboundBody::Upgrade));
            let (outbound, replay) = match body.take() {
                Some(OutboundBody::Replayable(bytes)) => (
                    body::full(bytes.clone()),
                    Some(OutboundBody::Replayable(bytes)),
                ),
                Some(OutboundBody::Upgrade) => (body::empty(), Some(OutboundBody::Upgrade)),
                Some(OutboundBody::Streaming(stream)) => {
                    let (tracked, done) = EndTracked::wrap(stream);
                    body_sent = done;
                    (body::boxed(tracked), None)
                }
                None => break,
            };
            // The headers are copied only when another attempt may follow
            // (retries left and a node not tried yet); the last one takes them.
            let may_retry = tried.len() <= self.retries as usize && tried.len() < self.nodes.len();
            let headers = if may_retry {
                head.headers.clone()
            } else {
                std::mem::take(&mut head.headers)
            };
            let request = match build_request(&head, headers, node, outbound) {
                Ok(request) => request,
                Err(e) => {
                    last = e;
                    break;
                }
            };
            node.waiting.fetch_add(1, Ordering::Relaxed);
            let sent_at = Instant::now();
            // The pool bounds a request's wait for its answer itself (a
            // timer kept per connection, cheaper than one per request); an
            // upgrade's own connection gets one here.
            let answer = if upgrade {
                let sending = node.pool.send_upgrade(request);
                match tokio::time::timeout(self.read_timeout, sending).await {
                    Ok(sent) => sent.map(|response| response.map(PooledBody::unpooled)),
                    Err(_) => Err(ReadTimedOut.into()),
                }
            } else {
                node.pool.send(request, self.read_timeout).await
            };
            node.waiting.fetch_sub(1, Ordering::Relaxed);
            let elapsed = sent_at.elapsed();
            node.latency.record(elapsed);
            match answer {
                Ok(mut response) => {
                    self.report(i, !matches!(response.status().as_u16(), 502..=504));
                    if wasmgate_observe::observing() {
                        response.extensions_mut().insert(UpstreamServed {
                            node: node.shared_address.clone(),
                            sent_at,
                            elapsed,
                        });
                    }
                    return Ok(response);
                }
                Err(e) if !e.is::<ReadTimedOut>() => {
                    if let Some(client) = ClientBodyError::find(e.as_ref()) {
                        // Not the node's fault: no health penalty, no retry.
                        return Err(UpstreamError::ClientBody {
                            status: client.status(),
                            message: client.to_string(),
                        });
                    }
                    if !refused_before && replay.is_some() && refused_unprocessed(e.as_ref()) {
                        // An HTTP/2 node that took none of it (it was
                        // closing): not the node's failure, and safe to send
                        // again (RFC 9113 8.7), once, on a new connection.
                        refused_before = true;
                        tried.pop();
                        body = replay;
                        continue;
                    }
                    self.report(i, false);
                    last_was_tls = e.downcast_ref::<UpstreamTlsError>().is_some();
                    last = format!("{}: {}", node.address, error_chain(e.as_ref()));
                    // A request whose streamed body was (partly) sent cannot
                    // be sent again; a refused connection consumed nothing
                    // hyper gives back, so it is retried only when replayable.
                    body = replay;
                }
                Err(_) => {
                    // A node waiting for the rest of a body the client has
                    // not sent yet is not a slow node.
                    if body_sent.load(Ordering::Relaxed) {
                        self.report(i, false);
                    }
                    return Err(UpstreamError::Timeout {
                        upstream: self.name.to_string(),
                        node: node.address.clone(),
                        timeout: self.read_timeout,
                    });
                }
            }
        }
        if last_was_tls {
            return Err(UpstreamError::Tls {
                upstream: self.name.to_string(),
                message: last,
            });
        }
        Err(UpstreamError::Unreachable {
            upstream: self.name.to_string(),
            attempts: tried.len() as u32,
            last,
        })
    }

    /// Whether node `i` is in rotation (healthy and not ejected).
    pub fn is_available(&self, i: usize) -> bool {
        self.available(i)
    }
}

/// A streamed request body that records when it has been read to its end.
struct EndTracked {
    inner: Body,
    done: Arc<AtomicBool>,
}

impl EndTracked {
    fn wrap(inner: Body) -> (EndTracked, Arc<AtomicBool>) {
        let done = Arc::new(AtomicBool::new(false));
        let tracked = EndTracked {
            inner,
            done: done.clone(),
        };
        (tracked, done)
    }
}

impl hyper::body::Body for EndTracked {
    type Data = Bytes;
    type Error = body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, body::BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.inner.is_end_stream() {
            self.done.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

fn build_request(
    head: &RequestHead,
    headers: HeaderMap,
    node: &Node,
    body: Body,
) -> Result<Request<Body>, String> {
    let uri = request_target(&head.path)?;
    let mut request = Request::new(body);
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = uri;
    // Upstream connections are HTTP/1.1 whatever the client spoke.
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    if !request.headers().contains_key(HOST) {
        if let Some(host) = &node.default_host {
            request.headers_mut().insert(HOST, host.clone());
        }
    }
    Ok(request)
}

/// The path as the request line's target (origin form; empty is `/`).
fn request_target(path: &str) -> Result<Uri, String> {
    if path.is_empty() {
        return Ok(Uri::from_static("/"));
    }
    if !path.starts_with('/') {
        return Err(format!("bad upstream path `{path}`: not origin-form"));
    }
    PathAndQuery::try_from(path)
        .map(Uri::from)
        .map_err(|e| format!("bad upstream path `{path}`: {e}"))
}

/// Whether an HTTP/2 node refused the stream without processing it: a
/// REFUSED_STREAM reset, or a stream above the last one a graceful GOAWAY
/// (NO_ERROR) let through.
fn refused_unprocessed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away()
                    && h2.is_remote()
                    && h2.reason() == Some(h2::Reason::NO_ERROR));
        }
        next = e.source();
    }
    false
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Waits for the next tick of `interval`, then gives the upstream if it
/// still exists (the background tasks hold only a `Weak`, so a reload that
/// drops the upstream ends them).
async fn next_tick(
    interval: &mut tokio::time::Interval,
    upstream: &Weak<Upstream>,
) -> Option<Arc<Upstream>> {
    interval.tick().await;
    upstream.upgrade()
}

fn interval_of(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// Closes idle connections past their timeout until the upstream is dropped.
async fn close_idle_forever(upstream: Weak<Upstream>) {
    let mut interval = interval_of(IDLE_TIMEOUT / 4);
    while let Some(upstream) = next_tick(&mut interval, &upstream).await {
        for node in &upstream.nodes {
            node.pool.close_expired();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request line's target is the path and query of the absolute URI
    /// the node and the path make, for every kind of path; what is not a
    /// path is refused.
    #[test]
    fn request_targets_are_the_paths_of_the_absolute_uris() {
        for path in ["/", "/a/b?x=1&y=%20z", "/%E2%82%AC", "//double", "/?", ""] {
            let absolute = format!("http://127.0.0.1:1000{path}")
                .parse::<Uri>()
                .unwrap();
            let target = request_target(path).unwrap();
            assert_eq!(
                target.path_and_query(),
                absolute.path_and_query(),
                "{path:?}"
            );
            assert_eq!(target.authority(), None, "{path:?}");
        }
        for path in ["*", "x", "http://elsewhere/", "/bad path"] {
            assert!(request_target(path).is_err(), "{path:?}");
        }
    }
}
