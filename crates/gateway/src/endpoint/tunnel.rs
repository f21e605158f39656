//! Upgraded connections (WebSocket and other HTTP/1.1 `Upgrade`s): the
//! request is forwarded with its `Upgrade` asking on a connection of its own
//! (after the route's filters saw its headers, as any request's); when the
//! node answers `101 Switching Protocols`, the client gets the `101` and the
//! two connections are joined, bytes copied both ways until either side
//! closes, the tunnel idles past its timeout or reaches its maximum
//! duration. A tunnel is a task of its own: a reload, which replaces routes
//! and upstreams, leaves it alone; it ends with its connections.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper::{Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wasmgate_config::UpgradeConfig;

use wasmgate_transport::body::{self, Body};
use wasmgate_transport::node_pool::PooledBody;

/// Bytes read at once from either side.
const CHUNK: usize = 16 * 1024;

/// What a route's upgrade request asks for, and the client's side of it.
pub(crate) struct UpgradeRequest {
    /// The `Upgrade` field as the client sent it (`websocket`).
    pub protocol: HeaderValue,
    /// Resolves to the client's connection once its `101` has gone out.
    client: OnUpgrade,
}

/// The upgrade `parts` asks for, when it is an HTTP/1.1 request with
/// `Connection: upgrade` and an `Upgrade` the route tunnels; `None` leaves
/// the request an ordinary one (its `Upgrade` dropped as hop-by-hop).
pub(crate) fn requested(parts: &mut Parts, allowed: &UpgradeConfig) -> Option<UpgradeRequest> {
    if parts.version != Version::HTTP_11 || allowed.protocols.is_empty() {
        return None;
    }
    let protocol = parts.headers.get(header::UPGRADE)?;
    // The first protocol offered, without its version (`websocket`, `foo/2`).
    let first = protocol.to_str().ok()?.split(',').next()?.trim();
    let name = first.split('/').next().unwrap_or(first);
    if !allowed.allows(name) || !connection_has_upgrade(&parts.headers) {
        return None;
    }
    let protocol = protocol.clone();
    let client = parts.extensions.remove::<OnUpgrade>()?;
    Some(UpgradeRequest { protocol, client })
}

fn connection_has_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Puts the upgrade asking back on headers the hop-by-hop rules cleaned.
pub(crate) fn ask_upstream(headers: &mut HeaderMap, protocol: &HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol.clone());
}

/// The node's answer to an upgrade request. After a `101`, the tunnel is
/// started (it waits for the client's `101` to go out) and the client gets
/// the `101` with the node's `Upgrade` and its other fields; any other
/// answer is passed on as it is, and the connection is closed after it.
pub(crate) fn answer(
    request: UpgradeRequest,
    mut response: Response<PooledBody>,
    route: &str,
    config: &UpgradeConfig,
) -> Response<Body> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return super::upstream::answer(response);
    }
    let protocol = response.headers().get(header::UPGRADE).cloned();
    let upstream = hyper::upgrade::on(&mut response);
    let mut answer = super::upstream::answer(response);
    *answer.body_mut() = body::empty();
    let headers = answer.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol.unwrap_or(request.protocol));
    let counters = counters(route);
    let limits = Limits {
        idle: Duration::from_millis(config.idle_timeout_ms),
        max: config.max_duration_ms.map(Duration::from_millis),
    };
    let route = route.to_string();
    tokio::spawn(async move {
        let (client, upstream) = match tokio::join!(request.client, upstream) {
            (Ok(client), Ok(upstream)) => (client, upstream),
            (client, upstream) => {
                let error = client.err().or(upstream.err());
                tracing::debug!(%route, error = ?error, "an upgrade did not complete");
                return;
            }
        };
        counters.opened.fetch_add(1, Ordering::Relaxed);
        let end = splice(client, upstream, limits, &counters).await;
        counters.closed.fetch_add(1, Ordering::Relaxed);
        counters.end(end);
        tracing::debug!(%route, end = end.as_str(), "tunnel closed");
    });
    answer
}

/// How long a tunnel may idle and last.
#[derive(Clone, Copy)]
struct Limits {
    idle: Duration,
    max: Option<Duration>,
}

/// Why a tunnel ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum End {
    /// Both sides closed (each direction ended, in either order).
    Closed,
    /// A side broke its connection (a reset, a write to a closed peer).
    Error,
    Idle,
    MaxDuration,
}

impl End {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Error => "error",
            End::Idle => "idle_timeout",
            End::MaxDuration => "max_duration",
        }
    }

    const ALL: [End; 4] = [End::Closed, End::Error, End::Idle, End::MaxDuration];
}

/// Copies bytes both ways (tokio's `copy_bidirectional`: one future polls
/// both directions, with no lock between a reader and a writer half). A side
/// that closes its sending half has that passed on (the other side's writer
/// is shut down) while the other direction goes on: a half-closed tunnel
/// keeps working the way TCP does.
async fn splice(client: Upgraded, upstream: Upgraded, limits: Limits, counters: &Counters) -> End {
    let started = Instant::now();
    // Milliseconds since `started` of the last byte moved either way.
    let last = AtomicU64::new(0);
    let mut client = Metered::new(TokioIo::new(client), &counters.to_upstream, &last, started);
    let mut upstream = Metered::new(TokioIo::new(upstream), &counters.to_client, &last, started);
    let both = async {
        // Over when both directions have ended, or at the first broken one.
        match tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, CHUNK, CHUNK)
            .await
        {
            Ok(_) => End::Closed,
            Err(_) => End::Error,
        }
    };
    let idle = async {
        loop {
            let since = Duration::from_millis(last.load(Ordering::Relaxed));
            let deadline = started + since + limits.idle;
            if Instant::now() >= deadline {
                return End::Idle;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    };
    let max = async {
        match limits.max {
            Some(max) => tokio::time::sleep(max).await,
            None => std::future::pending().await,
        }
        End::MaxDuration
    };
    tokio::select! {
        end = both => end,
        end = idle => end,
        end = max => end,
    }
}

/// One side of a tunnel, counting what is read from it as it is read: the
/// bytes (into the direction's counter, live in `/metrics`) and the time of
/// the last one (for the idle timeout).
struct Metered<'a, T> {
    io: T,
    bytes: &'a AtomicU64,
    last: &'a AtomicU64,
    started: Instant,
}

impl<'a, T> Metered<'a, T> {
    fn new(io: T, bytes: &'a AtomicU64, last: &'a AtomicU64, started: Instant) -> Self {
        Metered {
            io,
            bytes,
            last,
            started,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.bytes.fetch_add(n as u64, Ordering::Relaxed);
            let now = self.started.elapsed().as_millis() as u64;
            self.last.store(now, Ordering::Relaxed);
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<'_, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A route's tunnels since the process started (not per gateway: a tunnel
/// outlives the configuration it was opened under).
#[derive(Default)]
pub struct Counters {
    pub opened: AtomicU64,
    pub closed: AtomicU64,
    /// Bytes from the client to the upstream, and back.
    pub to_upstream: AtomicU64,
    pub to_client: AtomicU64,
    /// Closed tunnels by why they ended, in [`End::ALL`]'s order.
    ends: [AtomicU64; 4],
}

impl Counters {
    fn end(&self, end: End) {
        let i = End::ALL.iter().position(|e| *e == end).unwrap_or(0);
        self.ends[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Closed tunnels by why they ended (`closed`, `error`,
    /// `idle_timeout`, `max_duration`).
    pub fn ends(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        End::ALL
            .iter()
            .zip(&self.ends)
            .map(|(end, n)| (end.as_str(), n.load(Ordering::Relaxed)))
    }
}

static TUNNELS: LazyLock<Mutex<BTreeMap<String, Arc<Counters>>>> = LazyLock::new(Default::default);

fn counters(route: &str) -> Arc<Counters> {
    let mut tunnels = TUNNELS.lock().unwrap();
    if let Some(counters) = tunnels.get(route) {
        return counters.clone();
    }
    let counters = Arc::new(Counters::default());
    tunnels.insert(route.to_string(), counters.clone());
    counters
}

/// Every route that has had a tunnel, with its counters.
pub fn all() -> Vec<(String, Arc<Counters>)> {
    let tunnels = TUNNELS.lock().unwrap();
    tunnels
        .iter()
        .map(|(r, c)| (r.clone(), c.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Request;

    fn parts(version: Version, fields: &[(&'static str, &'static str)]) -> Parts {
        let mut request = Request::builder().version(version).uri("/chat");
        for (name, value) in fields {
            request = request.header(*name, *value);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        // What hyper's server puts in every HTTP/1.1 request it can upgrade
        // (here one that never completes: hyper makes real ones only).
        let on_upgrade = hyper::upgrade::on(Request::new(()));
        parts.extensions.insert(on_upgrade);
        parts
    }

    #[test]
    fn an_upgrade_is_taken_only_when_the_route_allows_it_and_connection_asks() {
        let websocket = UpgradeConfig::default();
        let asks = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
        ];
        let taken = requested(&mut parts(Version::HTTP_11, &asks), &websocket).unwrap();
        assert_eq!(taken.protocol, "WebSocket");
        // Not without `Connection: upgrade`, not over HTTP/1.0 or for a
        // protocol the route does not list, not when upgrades are off.
        let no_connection = [("upgrade", "websocket")];
        assert!(requested(&mut parts(Version::HTTP_11, &no_connection), &websocket).is_none());
        assert!(requested(&mut parts(Version::HTTP_10, &asks), &websocket).is_none());
        let other = [("connection", "upgrade"), ("upgrade", "foo/2, websocket")];
        assert!(requested(&mut parts(Version::HTTP_11, &other), &websocket).is_none());
        let foo = UpgradeConfig {
            protocols: vec!["foo".into()],
            ..UpgradeConfig::default()
        };
        assert!(requested(&mut parts(Version::HTTP_11, &other), &foo).is_some());
        let off = UpgradeConfig {
            protocols: vec![],
            ..UpgradeConfig::default()
        };
        assert!(requested(&mut parts(Version::HTTP_11, &asks), &off).is_none());
    }
}
