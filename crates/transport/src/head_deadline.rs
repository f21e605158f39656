//! The header read timeout of a connection's first request, kept on its bytes.
//!
//! hyper has a header read timeout of its own, but it closes the connection
//! without a word when it fires, and it starts only once HTTP/1 is chosen
//! (choosing between HTTP/1 and HTTP/2 waits for the first bytes, so a client
//! that connected and stayed silent was held forever). [`HeadDeadline`] wraps
//! the socket and, until the first response goes out, tells two cases apart:
//!
//! - nothing has arrived: the connection is closed silently when the timeout
//!   passes;
//! - part of a request head has arrived: the client gets `408 Request Timeout`,
//!   then the connection is closed (the slow-headers attack comes on fresh
//!   connections).
//!
//! A head ends at its first empty line; after it (the body has a timeout of
//! its own, in `body.rs`; an HTTP/2 connection's preface ends with an empty
//! line too), and once a response has been written,
//! there is no deadline here. Between keep-alive requests hyper's timer
//! (the same duration) closes an idle connection, silently, also when a later
//! head comes too slowly: telling when a response has ended, which a 408
//! there would need, takes the HTTP framing that hyper keeps to itself, and
//! a timer armed at the first response byte would cut long streamed
//! responses.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::stream_watch::StreamWatch;

pub(crate) const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Waiting {
    /// For a request to begin.
    Request,
    /// For the rest of a request head.
    RestOfHead,
    /// For nothing: the head is in (an HTTP/2 preface ends like a head), or
    /// a response went out.
    Nothing,
}

pub(crate) struct HeadDeadline<S> {
    inner: S,
    deadline: Pin<Box<Sleep>>,
    waiting: Waiting,
    /// The last bytes of the head so far, to find its end across reads.
    window: u32,
    /// Bytes of the connection seen so far (up to 4: the preface's start).
    seen: u8,
    /// Told when the connection turns out to be HTTP/2 (h2c: its preface
    /// begins `PRI `), for the HTTP/2 idle rule.
    streams: Option<Arc<StreamWatch>>,
}

impl<S> HeadDeadline<S> {
    pub(crate) fn new(inner: S, timeout: Duration, streams: Option<Arc<StreamWatch>>) -> Self {
        HeadDeadline {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            waiting: Waiting::Request,
            window: 0,
            seen: 0,
            streams,
        }
    }

    /// Follows the request head through bytes just read.
    fn saw_request_bytes(&mut self, bytes: &[u8]) {
        if self.waiting == Waiting::Request {
            self.waiting = Waiting::RestOfHead;
            self.window = 0;
        }
        if self.waiting != Waiting::RestOfHead {
            return;
        }
        for &byte in bytes {
            self.window = (self.window << 8) | u32::from(byte);
            if self.seen < 4 {
                self.seen += 1;
                if self.seen == 4 && self.window == u32::from_be_bytes(*b"PRI ") {
                    if let Some(streams) = &self.streams {
                        streams.is_http2();
                    }
                }
            }
            // An empty line: CRLF CRLF, or LF LF (which parsers accept too).
            if self.window == 0x0d0a_0d0a || self.window & 0xffff == 0x0a0a {
                self.waiting = Waiting::Nothing;
                return;
            }
        }
    }

    /// Once a response goes out, hyper's own header timer takes over (see
    /// the module docs).
    fn saw_response_bytes(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.waiting = Waiting::Nothing;
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw_request_bytes(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if this.waiting == Waiting::Nothing => Poll::Pending,
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    if this.waiting == Waiting::RestOfHead {
                        // Best effort: a client too slow to send its head
                        // has room in its receive buffer for this.
                        let _ = Pin::new(&mut this.inner).poll_write(cx, REQUEST_TIMEOUT);
                    }
                    this.waiting = Waiting::Nothing;
                    Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no complete request head within the header read timeout",
                    )))
                }
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = written {
            self.saw_response_bytes(&data[..n]);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            if n > 0 {
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &b[..]);
                self.saw_response_bytes(&first[..first.len().min(n)]);
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> HeadDeadline<()> {
        HeadDeadline {
            inner: (),
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            waiting: Waiting::Request,
            window: 0,
            seen: 0,
            streams: Some(StreamWatch::new()),
        }
    }

    #[tokio::test]
    async fn a_bare_lf_head_ends_too() {
        let mut t = tracker();
        t.saw_request_bytes(b"GET / HTTP/1.1\nhost: x\n");
        assert_eq!(t.waiting, Waiting::RestOfHead);
        t.saw_request_bytes(b"\n");
        assert_eq!(t.waiting, Waiting::Nothing);
    }

    #[tokio::test]
    async fn a_head_ends_at_its_empty_line_even_across_reads() {
        let mut t = tracker();
        t.saw_request_bytes(b"GET / HTTP/1.1\r\nhost: x\r");
        assert_eq!(t.waiting, Waiting::RestOfHead);
        t.saw_request_bytes(b"\n\r");
        assert_eq!(t.waiting, Waiting::RestOfHead);
        t.saw_request_bytes(b"\nbody");
        assert_eq!(t.waiting, Waiting::Nothing);
        // After a response, hyper's timer has the connection.
        t.saw_response_bytes(b"HTTP/1.1 200 OK\r\n");
        t.saw_request_bytes(b"GET /next HTTP/1.1\r\n");
        assert_eq!(t.waiting, Waiting::Nothing);
    }

    #[tokio::test]
    async fn http2_connections_have_no_head_deadline() {
        let mut t = tracker();
        t.saw_request_bytes(b"PR");
        t.saw_request_bytes(b"I * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(t.waiting, Waiting::Nothing);
        assert!(
            t.streams.as_ref().unwrap().http2(),
            "the preface marks it HTTP/2"
        );
        t.saw_response_bytes(b"\x00\x00\x00\x04");
        t.saw_request_bytes(b"\x00\x00\x04\x08");
        assert_eq!(t.waiting, Waiting::Nothing);
    }
}
