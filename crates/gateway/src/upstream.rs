//! Upstreams: weighted nodes, the balancer that picks one, pooled
//! connections to them (`node_pool`), retries to the next node, and the
//! health state active probes and passive failures keep.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{HeaderValue, HOST};
use hyper::http::uri::PathAndQuery;
use hyper::{HeaderMap, Method, Request, Response, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;

use wasmgate_runtime::LatencyHistogram;

use crate::body::{self, Body, ClientBodyError};
use crate::counted_connector::CountedConnector;
use crate::node_pool::{NodePool, PooledBody};
use wasmgate_config::{ActiveCheck, Balance, HashOn, PassiveCheck, UpstreamConfig};

/// Idle keep-alive connections per node, and how long one may stay idle.
const MAX_IDLE_PER_NODE: usize = 256;
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Virtual points per unit of weight on the consistent-hash ring.
const RING_POINTS_PER_WEIGHT: u32 = 40;

pub struct Upstream {
    pub name: Arc<str>,
    /// What Proxy-Wasm filters read as `cluster_name`, in the form Envoy
    /// and Higress give it (`outbound|<port>||<name>`, the port of the
    /// first node), which Higress's `_match_service_` rules parse. Shared
    /// with every request's exchange.
    pub cluster_name: Arc<str>,
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

pub struct Node {
    pub address: String,
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
pub struct RequestHead {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub headers: HeaderMap,
}

/// A body that can be sent again (retries) or only once.
pub enum OutboundBody {
    Replayable(Bytes),
    Streaming(Body),
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream `{upstream}`: no node could be reached ({attempts} tried): {last}")]
    Unreachable {
        upstream: String,
        attempts: u32,
        last: String,
    },
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

/// `outbound|<port>||<name>`: see [`Upstream::cluster_name`].
fn cluster_name(config: &UpstreamConfig) -> String {
    let port = config
        .nodes
        .first()
        .and_then(|n| n.address.rsplit_once(':'))
        .map_or("", |(_, port)| port);
    format!("outbound|{port}||{}", config.name)
}

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> Arc<Upstream> {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(config.connect_timeout_ms)));
        connector.set_nodelay(true);
        let gauges: crate::counted_connector::ConnectionGauges = Arc::new(
            config
                .nodes
                .iter()
                .map(|n| (n.address.clone(), Arc::default()))
                .collect(),
        );
        let connector = CountedConnector::new(connector, gauges.clone());
        let nodes: Vec<Node> = config
            .nodes
            .iter()
            .map(|n| Node {
                address: n.address.clone(),
                default_host: HeaderValue::from_str(&n.address).ok(),
                pool: NodePool::new(
                    &n.address,
                    connector.clone(),
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
            .collect();
        let mut ring = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            for point in 0..node.weight * RING_POINTS_PER_WEIGHT {
                ring.push((hash(&(node.address.as_str(), point)), i));
            }
        }
        ring.sort_unstable();
        let upstream = Arc::new(Upstream {
            name: config.name.as_str().into(),
            cluster_name: cluster_name(config).into(),
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
            tokio::spawn(probe_forever(Arc::downgrade(&upstream), active.clone()));
        }
        tokio::spawn(close_idle_forever(Arc::downgrade(&upstream)));
        upstream
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn available(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        if !node.healthy.load(Ordering::Relaxed) {
            return false;
        }
        let mut ejected = node.ejected_until.lock().unwrap();
        match *ejected {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                *ejected = None;
                true
            }
            None => true,
        }
    }

    /// True when nodes are picked by a request's hash key (consistent hashing).
    pub fn hashes(&self) -> bool {
        self.balance == Balance::ConsistentHash
    }

    /// The node for this attempt, skipping `tried`. When every node is down
    /// the gateway tries them anyway ("panic mode", as Envoy): a wrong health
    /// verdict must not take the whole upstream out.
    pub fn pick(&self, key: Option<u64>, tried: &[usize]) -> Option<usize> {
        if self.nodes.len() == 1 {
            // Healthy or not, the only node is the one (panic mode), and the
            // balancer has nothing to weigh: no lock, no list.
            return tried.is_empty().then_some(0);
        }
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !tried.contains(i) && self.available(*i))
            .collect();
        let candidates = if candidates.is_empty() {
            (0..self.nodes.len())
                .filter(|i| !tried.contains(i))
                .collect()
        } else {
            candidates
        };
        if candidates.is_empty() {
            return None;
        }
        match (self.balance, key) {
            (Balance::ConsistentHash, Some(key)) => self.on_ring(key, &candidates),
            _ => Some(self.round_robin(&candidates)),
        }
    }

    fn round_robin(&self, candidates: &[usize]) -> usize {
        let mut current = self.current_weights.lock().unwrap();
        let mut total = 0i64;
        let mut best = candidates[0];
        for &i in candidates {
            current[i] += self.nodes[i].weight as i64;
            total += self.nodes[i].weight as i64;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        best
    }

    fn on_ring(&self, key: u64, candidates: &[usize]) -> Option<usize> {
        let start = self.ring.partition_point(|&(point, _)| point < key);
        (0..self.ring.len())
            .map(|k| self.ring[(start + k) % self.ring.len()].1)
            .find(|i| candidates.contains(i))
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
            let (outbound, replay) = match body.take() {
                Some(OutboundBody::Replayable(bytes)) => (
                    body::full(bytes.clone()),
                    Some(OutboundBody::Replayable(bytes)),
                ),
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
            let answer = tokio::time::timeout(self.read_timeout, node.pool.send(request)).await;
            node.waiting.fetch_sub(1, Ordering::Relaxed);
            node.latency.record(sent_at.elapsed());
            match answer {
                Ok(Ok(response)) => {
                    self.report(i, !matches!(response.status().as_u16(), 502..=504));
                    return Ok(response);
                }
                Ok(Err(e)) => {
                    if let Some(client) = ClientBodyError::find(e.as_ref()) {
                        // Not the node's fault: no health penalty, no retry.
                        return Err(UpstreamError::ClientBody {
                            status: client.status(),
                            message: client.to_string(),
                        });
                    }
                    self.report(i, false);
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
        Err(UpstreamError::Unreachable {
            upstream: self.name.to_string(),
            attempts: tried.len() as u32,
            last,
        })
    }

    /// Passive health: consecutive failures eject a node for a while.
    fn report(&self, i: usize, ok: bool) {
        let Some(passive) = &self.passive else { return };
        let node = &self.nodes[i];
        if ok {
            node.failures.store(0, Ordering::Relaxed);
            return;
        }
        let failures = node.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= passive.max_failures.max(1) {
            node.failures.store(0, Ordering::Relaxed);
            *node.ejected_until.lock().unwrap() =
                Some(Instant::now() + Duration::from_millis(passive.ejection_ms));
            tracing::warn!(upstream = %self.name, node = %node.address, failures, "node ejected after consecutive failures");
        }
    }

    /// Whether node `i` is in rotation (healthy and not ejected).
    pub fn is_available(&self, i: usize) -> bool {
        self.available(i)
    }
}

pub fn hash(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
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

/// Probes every node until the upstream is dropped.
async fn probe_forever(upstream: Weak<Upstream>, check: ActiveCheck) {
    let mut interval = interval_of(Duration::from_millis(check.interval_ms.max(10)));
    while let Some(upstream) = next_tick(&mut interval, &upstream).await {
        for node in &upstream.nodes {
            let ok = probe(node, &check).await;
            let streak = &node.probe_streak;
            let healthy = node.healthy.load(Ordering::Relaxed);
            if ok == healthy {
                streak.store(0, Ordering::Relaxed);
                continue;
            }
            let n = streak.fetch_add(1, Ordering::Relaxed) + 1;
            let threshold = if ok {
                check.healthy_threshold
            } else {
                check.unhealthy_threshold
            };
            if n >= threshold.max(1) {
                streak.store(0, Ordering::Relaxed);
                node.healthy.store(ok, Ordering::Relaxed);
                tracing::warn!(upstream = %upstream.name, node = %node.address, healthy = ok, "active health check changed a node's state");
            }
        }
    }
}

async fn probe(node: &Node, check: &ActiveCheck) -> bool {
    let head = RequestHead {
        method: Method::GET,
        path: check.path.clone(),
        headers: HeaderMap::new(),
    };
    let Ok(request) = build_request(&head, HeaderMap::new(), node, body::empty()) else {
        return false;
    };
    let exchange = async {
        let response = node.pool.send(request).await.ok()?;
        let healthy = response.status().as_u16() < 500;
        // Read to the end, so the connection is kept for the next probe.
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.ok()?;
        }
        Some(healthy)
    };
    let timeout = Duration::from_millis(check.timeout_ms);
    matches!(
        tokio::time::timeout(timeout, exchange).await,
        Ok(Some(true))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgate_config::{HealthCheckConfig, NodeConfig};

    fn upstream(balance: Balance, weights: &[u32]) -> Arc<Upstream> {
        Upstream::new(&UpstreamConfig {
            name: "u".into(),
            nodes: weights
                .iter()
                .enumerate()
                .map(|(i, &weight)| NodeConfig {
                    address: format!("127.0.0.1:{}", 1000 + i),
                    weight,
                })
                .collect(),
            balance,
            hash_on: HashOn::ClientIp,
            hash_header: None,
            connect_timeout_ms: 100,
            read_timeout_ms: 100,
            retries: 1,
            health_check: HealthCheckConfig::default(),
        })
    }

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

    #[tokio::test]
    async fn smooth_weighted_round_robin_interleaves() {
        let u = upstream(Balance::RoundRobin, &[5, 1, 1]);
        let picks: Vec<usize> = (0..7).map(|_| u.pick(None, &[]).unwrap()).collect();
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[tokio::test]
    async fn consistent_hash_is_stable_and_skips_down_nodes() {
        let u = upstream(Balance::ConsistentHash, &[1, 1, 1]);
        let key = hash(&"client-a");
        let first = u.pick(Some(key), &[]).unwrap();
        assert!((0..10).all(|_| u.pick(Some(key), &[]) == Some(first)));
        u.nodes[first].healthy.store(false, Ordering::Relaxed);
        let second = u.pick(Some(key), &[]).unwrap();
        assert_ne!(second, first);
        // Keys spread over the nodes.
        let mut seen = [0; 3];
        for k in 0..300 {
            seen[u.pick(Some(hash(&k)), &[]).unwrap()] += 1;
        }
        assert!(seen.iter().filter(|&&n| n > 0).count() >= 2);
    }

    #[tokio::test]
    async fn every_node_down_still_picks_one() {
        let u = upstream(Balance::RoundRobin, &[1, 1]);
        for node in &u.nodes {
            node.healthy.store(false, Ordering::Relaxed);
        }
        assert!(u.pick(None, &[]).is_some());
        assert_eq!(u.pick(None, &[0, 1]), None);
    }

    /// A single node is picked once per request, healthy, ejected or not,
    /// whatever the balance.
    #[tokio::test]
    async fn a_single_node_is_picked_once_whatever_its_state() {
        for balance in [Balance::RoundRobin, Balance::ConsistentHash] {
            let u = upstream(balance, &[3]);
            for healthy in [true, false] {
                u.nodes[0].healthy.store(healthy, Ordering::Relaxed);
                assert_eq!(u.pick(Some(7), &[]), Some(0));
                assert_eq!(u.pick(None, &[]), Some(0));
                assert_eq!(u.pick(None, &[0]), None);
            }
        }
    }
}
