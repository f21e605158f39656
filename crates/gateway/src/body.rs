//! The body type every response and upstream request uses: any stream of
//! byte frames (an upstream's body passed through, a filtered stream, a fixed
//! answer), boxed once so the request path has one type.

use std::future::Future;
use std::pin::Pin;
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

/// Any body whose errors can be boxed.
pub fn boxed<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A client's request body with an idle deadline: a client that stops
/// sending mid-body for longer than `idle` ends the body with
/// [`ClientBodyError::Stalled`] (408), and broken framing becomes
/// [`ClientBodyError::Malformed`] (400). Both are the client's fault, so
/// they are told apart from upstream failures (502) wherever the body goes
/// and never count against an upstream node's health.
pub struct ClientBody {
    inner: hyper::body::Incoming,
    idle: Duration,
    /// Allocated at the first wait, re-armed after each frame.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

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
    pub fn new(inner: hyper::body::Incoming, idle: Duration) -> ClientBody {
        ClientBody {
            inner,
            idle,
            deadline: None,
            armed: false,
        }
    }
}

impl hyper::body::Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                // Progress: the idle clock starts again at the next wait.
                this.armed = false;
                Poll::Ready(frame.map(|f| f.map_err(|e| ClientBodyError::Malformed(e.to_string()))))
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
                    Poll::Ready(()) => Poll::Ready(Some(Err(ClientBodyError::Stalled(idle)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
