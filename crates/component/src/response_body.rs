//! A component's response body as the client gets it: the guest's bytes,
//! then its end, which counts only if the guest's call ended well.
//!
//! wasmtime's body ends cleanly when the guest's `outgoing-body` goes away
//! without `finish`, which is what happens to it when the guest traps or
//! runs out of time after sending its response's head (the store is dropped
//! with it). `wasi:http` says such a body is incomplete, and a proxy must not
//! pass an incomplete body off as whole: so at the guest body's end this
//! waits for the request's task, and if the call failed the body ends in an
//! error instead ([`CutBody`]), which hyper turns into a connection closed
//! without the last chunk (HTTP/1.1) or a `RST_STREAM` (HTTP/2), as it does
//! for an upstream that dies mid-body.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::task::JoinHandle;
use wasmgate_runtime::CrashReport;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// The request's task: its outcome says whether the body is whole.
pub(crate) type CallTask = JoinHandle<Result<(), Box<CrashReport>>>;

pub struct ResponseBody {
    guest: HyperOutgoingBody,
    /// `None` once its outcome is known (or the body failed by itself).
    call: Option<CallTask>,
}

/// Why a component's response body was cut: the failure's kind (`trap`,
/// `timeout`, `out_of_memory`, `host_error`, or `plugin_error` when the
/// guest aborted the body itself), for the access log and the trace.
#[derive(Debug, thiserror::Error)]
#[error("the component's response body was cut: {message}")]
pub struct CutBody {
    pub kind: &'static str,
    pub message: String,
}

impl ResponseBody {
    pub(crate) fn new(guest: HyperOutgoingBody, call: CallTask) -> ResponseBody {
        ResponseBody {
            guest,
            call: Some(call),
        }
    }

    fn cut(
        &mut self,
        kind: &'static str,
        message: String,
    ) -> Poll<Option<Result<Frame<Bytes>, CutBody>>> {
        self.call = None;
        Poll::Ready(Some(Err(CutBody { kind, message })))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = CutBody;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, CutBody>>> {
        let this = &mut *self;
        match Pin::new(&mut this.guest).poll_frame(cx) {
            Poll::Ready(None) => {}
            Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(error))) => {
                // The guest aborted its body (or wrote less than it declared).
                return this.cut("plugin_error", error.to_string());
            }
            Poll::Pending => return Poll::Pending,
        }
        let Some(call) = &mut this.call else {
            return Poll::Ready(None);
        };
        match Pin::new(call).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Ok(()))) => {
                this.call = None;
                Poll::Ready(None)
            }
            Poll::Ready(Ok(Err(report))) => this.cut(report.kind.as_str(), report.message),
            Poll::Ready(Err(_)) => this.cut("host_error", "the request's task panicked".into()),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.call.is_none() && self.guest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.guest.size_hint()
    }
}
