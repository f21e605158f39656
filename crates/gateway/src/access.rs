//! A request's access-log line (`wasmgate_observe::access_log`): what is
//! known when the request comes in ([`Pending::begin`]), what its answer
//! says ([`Pending::finish`]: the status, the node that answered, the
//! gateway's own error kind), and what its chain did (`ChainNotes`). The
//! line is queued when the response body ends, or is dropped by a client
//! that went away, so `bytes_out` and `duration_ms` cover the whole answer.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::Response;
use wasmgate_observe::access_log::{millis, AccessLog, Entry, FilterTime};

use crate::body::{self, Body, BoxError};
use crate::chain::ChainNotes;
use crate::grpc::GatewayAnswer;
use crate::upstream::UpstreamServed;

/// A line being put together.
pub(crate) struct Pending {
    log: &'static AccessLog,
    entry: Entry,
    started: Instant,
    bytes_in: Arc<AtomicU64>,
    notes: Option<Arc<ChainNotes>>,
}

impl Pending {
    /// What the request says about itself, if the node keeps a log.
    pub fn begin(
        parts: &hyper::http::request::Parts,
        host: &str,
        peer: SocketAddr,
    ) -> Option<Pending> {
        let log = wasmgate_observe::access_log::global()?;
        let request_id = crate::request_id::next();
        Some(Pending {
            log,
            entry: Entry {
                time: Some(SystemTime::now()),
                request_id,
                client: Some(peer),
                method: parts.method.as_str().to_string(),
                host: host.to_string(),
                path: parts
                    .uri
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_string(),
                protocol: match parts.version {
                    hyper::Version::HTTP_2 => "HTTP/2",
                    hyper::Version::HTTP_10 => "HTTP/1.0",
                    _ => "HTTP/1.1",
                },
                ..Entry::default()
            },
            started: Instant::now(),
            bytes_in: Arc::default(),
            notes: None,
        })
    }

    /// The request's id: the one its filters, errors and crash reports use.
    pub fn request_id(&self) -> u64 {
        self.entry.request_id
    }

    /// Where the client body's reader counts its bytes.
    pub fn bytes_in(&self) -> Arc<AtomicU64> {
        self.bytes_in.clone()
    }

    /// Request body bytes read by someone else than a counting reader.
    pub fn read(&self, bytes: u64) {
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn set_route(&mut self, route: &str) {
        self.entry.route = route.to_string();
    }

    /// The chain's notes, shared with the chain that fills them.
    pub fn notes(&mut self, notes: Arc<ChainNotes>) {
        self.notes = Some(notes);
    }

    /// What the answer tells; the line goes when its body is over.
    pub fn finish(mut self, response: Response<Body>) -> Response<Body> {
        self.entry.status = response.status().as_u16();
        if let Some(answer) = response.extensions().get::<GatewayAnswer>() {
            if answer.kind != "local" {
                self.entry.error = Some(answer.kind.clone());
            }
        }
        let served = response.extensions().get::<UpstreamServed>().cloned();
        let served = served.or_else(|| self.notes.as_ref()?.upstream());
        if let Some(served) = served {
            self.entry.upstream = Some(served.node.to_string());
            self.entry.upstream_ms = Some(millis(served.elapsed));
        }
        response.map(|inner| {
            body::boxed(LoggedBody {
                inner,
                sent: 0,
                pending: Some(self),
            })
        })
    }

    fn send(mut self, bytes_out: u64) {
        self.entry.bytes_out = bytes_out;
        self.entry.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.entry.duration_ms = millis(self.started.elapsed());
        if let Some(notes) = &self.notes {
            self.entry.filters = notes
                .times()
                .map(|(name, spent)| FilterTime {
                    name: name.to_string(),
                    ms: millis(spent),
                })
                .collect();
            self.entry.local_response = notes.local_response().map(str::to_string);
        }
        self.log.record(self.entry);
    }
}

/// `response`, logged when `pending` is a line being made.
pub(crate) fn logged(pending: Option<Pending>, response: Response<Body>) -> Response<Body> {
    match pending {
        Some(pending) => pending.finish(response),
        None => response,
    }
}

/// The response body, counted; its end (or drop) queues the line.
struct LoggedBody {
    inner: Body,
    sent: u64,
    pending: Option<Pending>,
}

impl hyper::body::Body for LoggedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.sent += frame.data_ref().map_or(0, Bytes::len) as u64;
                if this.inner.is_end_stream() {
                    this.done();
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.done(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl LoggedBody {
    fn done(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.send(self.sent);
        }
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.done();
    }
}
