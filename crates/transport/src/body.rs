//! The body type every response and upstream request uses: any stream of
//! byte frames (an upstream's body passed through, a filtered stream, a fixed
//! answer), boxed once so the request path has one type.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A whole response (an error answer, say) with the common body type.
pub fn full_response(response: hyper::Response<Full<Bytes>>) -> hyper::Response<Body> {
    response.map(boxed)
}

/// Any body whose errors can be boxed.
pub fn boxed<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// What [`peek`] found.
pub enum Peeked {
    /// The body is over.
    Ended,
    /// Its next frame (or error), already there.
    Next(Result<hyper::body::Frame<Bytes>, BoxError>),
    /// Nothing yet.
    NotYet,
}

/// The body's next frame if it is there without waiting. A body without a
/// size (chunked, a component's) often has its end ready right behind its
/// first frame; `is_end_stream` cannot tell without this.
pub fn peek(body: &mut Body) -> Peeked {
    use hyper::body::Body as _;
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(None) => Peeked::Ended,
        Poll::Ready(Some(frame)) => Peeked::Next(frame),
        Poll::Pending => Peeked::NotYet,
    }
}

/// `rest` with `frame` in front of it (a frame [`peek`] took).
pub fn prepended(frame: Result<hyper::body::Frame<Bytes>, BoxError>, rest: Body) -> Body {
    Prepended {
        first: Some(frame),
        rest,
    }
    .boxed_unsync()
}

struct Prepended {
    first: Option<Result<hyper::body::Frame<Bytes>, BoxError>>,
    rest: Body,
}

impl hyper::body::Body for Prepended {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        match self.first.take() {
            Some(frame) => Poll::Ready(Some(frame)),
            None => Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }
}

/// A client's request body with an idle deadline: a client that stops
/// sending mid-body for longer than `idle` ends the body with
/// [`ClientBodyError::Stalled`] (408), and broken framing becomes
/// [`ClientBodyError::Malformed`] (400). Both are the client's fault, so
/// they are told apart from upstream failures (502) wherever the body goes
/// and never count against an upstream node's health.
///
/// Dropped before its end (the gateway answered early: a filter refused the
/// request, 413, a dead upstream), the rest is read and thrown away for a
/// while by a task of its own, as nginx's lingering close does: a server
/// that closes a connection with unread bytes resets it, and the reset can
/// overtake its answer, so the client would see a broken connection
/// instead of its 403 or 413.
pub struct ClientBody {
    /// Taken only by `Drop`.
    inner: Option<RequestBody>,
    idle: Duration,
    /// Allocated at the first wait, re-armed after each frame.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
    /// The body failed (stalled, malformed): nothing more to read.
    failed: bool,
    /// Bytes read so far, for the access log (when it is on).
    counted: Option<Arc<AtomicU64>>,
}

/// How long, and how much, an abandoned body is read on (`ClientBody`).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    #[error("the client sent no body data for {0:?}")]
    Stalled(Duration),
    #[error("the client's request body is malformed: {0}")]
    Malformed(String),
}

impl ClientBodyError {
    pub fn status(&self) -> hyper::StatusCode {
        match self {
            ClientBodyError::Stalled(_) => hyper::StatusCode::REQUEST_TIMEOUT,
            ClientBodyError::Malformed(_) => hyper::StatusCode::BAD_REQUEST,
        }
    }

    /// The client body error somewhere in `error`'s chain, if any.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a ClientBodyError> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<ClientBodyError>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }
}

impl ClientBody {
    pub fn new(inner: RequestBody, idle: Duration) -> ClientBody {
        ClientBody {
            inner: Some(inner),
            idle,
            deadline: None,
            armed: false,
            failed: false,
            counted: None,
        }
    }

    /// Counts the bytes read into `bytes` (the access log's `bytes_in`).
    pub fn counted_into(mut self, bytes: Arc<AtomicU64>) -> ClientBody {
        self.counted = Some(bytes);
        self
    }

    fn inner(&self) -> &RequestBody {
        self.inner.as_ref().expect("taken only by drop")
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if self.failed || hyper::body::Body::is_end_stream(&inner) {
            return;
        }
        let RequestBody(Inner::Hyper(inner)) = inner else {
            return; // the listener's own codec reads the rest itself (http1_server.rs)
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(linger(inner));
        }
    }
}

/// Reads and drops what is left of an abandoned body (see `ClientBody`).
async fn linger(mut body: hyper::body::Incoming) {
    let drain = async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > LINGER_BYTES {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

impl hyper::body::Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        let inner = this.inner.as_mut().expect("taken only by drop");
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                // Progress: the idle clock starts again at the next wait.
                this.armed = false;
                if let (Some(counted), Some(Ok(frame))) = (&this.counted, &frame) {
                    let read = frame.data_ref().map_or(0, Bytes::len) as u64;
                    counted.fetch_add(read, std::sync::atomic::Ordering::Relaxed);
                }
                Poll::Ready(frame.map(|f| {
                    f.map_err(|e| {
                        this.failed = true;
                        ClientBodyError::Malformed(e.to_string())
                    })
                }))
            }
            Poll::Pending => {
                let idle = this.idle;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if !std::mem::replace(&mut this.armed, true) {
                    deadline.as_mut().reset(tokio::time::Instant::now() + idle);
                }
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.failed = true;
                        Poll::Ready(Some(Err(ClientBodyError::Stalled(idle))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(self.inner())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(self.inner())
    }
}

/// A request's body as a listener hands it over: read by hyper (HTTP/2,
/// TLS, upgrades), or by the listener's own HTTP/1.1 codec
/// (`http1_server.rs`), or none at all.
pub struct RequestBody(Inner);

enum Inner {
    Hyper(hyper::body::Incoming),
    Http1(crate::http1_server::Http1RequestBody),
    Empty,
}

impl RequestBody {
    pub(crate) fn hyper(body: hyper::body::Incoming) -> RequestBody {
        RequestBody(Inner::Hyper(body))
    }

    pub(crate) fn http1(body: crate::http1_server::Http1RequestBody) -> RequestBody {
        RequestBody(Inner::Http1(body))
    }

    /// A request without a body.
    pub fn empty() -> RequestBody {
        RequestBody(Inner::Empty)
    }
}

impl hyper::body::Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Inner::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Inner::Http1(body) => Pin::new(body).poll_frame(cx),
            Inner::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Hyper(body) => hyper::body::Body::is_end_stream(body),
            Inner::Http1(body) => hyper::body::Body::is_end_stream(body),
            Inner::Empty => true,
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match &self.0 {
            Inner::Hyper(body) => hyper::body::Body::size_hint(body),
            Inner::Http1(body) => hyper::body::Body::size_hint(body),
            Inner::Empty => hyper::body::SizeHint::with_exact(0),
        }
    }
}
