//! A request's body read by the listener's own HTTP/1.1 codec, and the
//! connection's read side it borrows while it is read.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::body::BoxError;
use crate::http1_framing::{Length, Step, READ_SIZE};

/// The connection's read side: the socket and what the client sent that
/// no request has used yet.
pub(crate) struct Reader {
    pub(super) socket: OwnedReadHalf,
    pub(super) buffer: BytesMut,
}

impl Reader {
    /// Reads what the client has sent into the buffer (`Ok(0)`: it closed
    /// its side).
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buffer.capacity() == self.buffer.len() {
            self.buffer.reserve(READ_SIZE);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.socket), cx, &mut self.buffer)
    }
}

/// The read side given back to the connection when a body has ended or is
/// dropped, with how much of the body is still unread.
pub(super) struct Returned {
    pub(super) reader: Reader,
    pub(super) length: Length,
}

/// A request body with a length or chunked, read from the connection as it
/// is polled (no task of the connection's reads it meanwhile). When it
/// ends, or is dropped before, the connection gets its read side back
/// (with the framing left, which the connection then reads and throws away
/// before the next request, or closes).
pub struct Http1RequestBody {
    reader: Option<Reader>,
    length: Length,
    home: Option<oneshot::Sender<Returned>>,
}

impl Http1RequestBody {
    pub(super) fn new(reader: Reader, length: Length, home: oneshot::Sender<Returned>) -> Self {
        Http1RequestBody {
            reader: Some(reader),
            length,
            home: Some(home),
        }
    }

    /// Gives the read side back to the connection.
    fn go_home(&mut self) {
        if let (Some(reader), Some(home)) = (self.reader.take(), self.home.take()) {
            let length = std::mem::replace(&mut self.length, Length::Ended);
            let _ = home.send(Returned { reader, length });
        }
    }

    /// The body failed: the connection is not read again.
    fn fail(&mut self, error: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.reader = None;
        self.home = None;
        self.length = Length::Ended;
        Poll::Ready(Some(Err(error)))
    }
}

impl Drop for Http1RequestBody {
    fn drop(&mut self) {
        self.go_home();
    }
}

impl hyper::body::Body for Http1RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(reader) = this.reader.as_mut() else {
                return Poll::Ready(None);
            };
            match this.length.step(&mut reader.buffer) {
                Err(e) => return this.fail(e),
                Ok(Step::Frame(frame)) => {
                    if this.length.is_ended() {
                        this.go_home();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(Step::End) => {
                    this.go_home();
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => {}
            }
            match ready!(reader.poll_fill(cx)) {
                Ok(0) => {
                    let cut = "the client closed the connection before its request body ended";
                    return this.fail(cut.into());
                }
                Ok(_) => {}
                Err(e) => return this.fail(e.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.length.is_ended()
    }

    fn size_hint(&self) -> SizeHint {
        self.length.size_hint()
    }
}

/// A connection handed to hyper with the bytes already read from it in
/// front (an HTTP/2 preface, or the head of a request this codec leaves to
/// hyper).
pub(crate) struct Prefixed {
    prefix: Bytes,
    stream: TcpStream,
}

impl Prefixed {
    pub(super) fn new(prefix: Bytes, stream: TcpStream) -> Self {
        Prefixed { prefix, stream }
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
