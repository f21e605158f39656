//! HTTP/1.1 to an upstream node, written and read by the request's own task
//! (issue 57's design step 1, docs/benchmarks.md "Issue 57, the data
//! plane's design step").
//!
//! hyper's client connection lives on a task of its own: a request is
//! handed to it through a channel, its answer's head comes back through
//! another, and the body's frames through a third, each hop waking another
//! task. Here the request's task writes the head, reads the answer's head
//! (parsed by `httparse`, the parser hyper itself uses) and, as the body is
//! polled, reads its frames from the socket itself: no task, no channel.
//!
//! It carries the requests that are most of a proxy's: a head without a
//! body. A request with a body, an upgrade and every HTTP/2 connection stay
//! on hyper's connections (node_pool.rs): sending a body while the answer
//! may already be streaming back needs both directions driven at once,
//! which hyper's connection task does.
//!
//! The answer's framing is RFC 9112's (section 6.3): no body for HEAD, 1xx,
//! 204 and 304; chunked when the last transfer coding is; otherwise the
//! Content-Length (repeated values must agree); otherwise until the node
//! closes. Interim (1xx) answers are passed over, as hyper does.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Frame, SizeHint};
use hyper::ext::ReasonPhrase;
use hyper::header::HeaderMap;
use hyper::http::response::Parts;
use hyper::{Method, Response, StatusCode, Uri, Version};
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::body::BoxError;
use crate::connector::CountedConnection;
use crate::http1_framing::{
    header_map, Chunk, Facts, Length, Place, Step, MAX_FIELDS, MAX_HEAD, READ_SIZE,
};
use crate::lazy_deadline::{self, LazyDeadline};

/// A connection to a node, plain or TLS.
pub(crate) enum Stream {
    Plain(CountedConnection),
    Tls(Box<tokio_rustls::client::TlsStream<CountedConnection>>),
}

/// An HTTP/1.1 connection between exchanges: its socket, and what the node
/// sent that no exchange has used.
pub(crate) struct Http1Connection {
    stream: Stream,
    buffer: BytesMut,
    /// The request head as it goes out (kept: its capacity serves the next).
    head: Vec<u8>,
    /// The read timeout of the connection's exchanges, armed by the first
    /// (lazy_deadline.rs: a timer per request cost ~1k instructions).
    deadline: Option<LazyDeadline>,
}

/// Why an exchange failed.
pub(crate) enum ExchangeError {
    /// The node sent nothing back: it closed (or reset) the connection. On
    /// a reused connection that is the node closing it while it was idle,
    /// and an idempotent request can be sent again on another.
    NoAnswer(io::Error),
    Failed(BoxError),
    /// No answer's head before the deadline.
    TimedOut,
}

impl From<BoxError> for ExchangeError {
    fn from(error: BoxError) -> Self {
        ExchangeError::Failed(error)
    }
}

/// What a parse of the buffered bytes gave.
enum Parsed {
    Partial,
    /// An interim (1xx) answer, consumed.
    Interim,
    Final(Parts, Framing),
}

impl Http1Connection {
    pub(crate) fn new(stream: Stream) -> Self {
        Http1Connection {
            stream,
            buffer: BytesMut::new(),
            head: Vec::new(),
            deadline: None,
        }
    }

    /// Whether an idle connection is done for: the node closed it, reset
    /// it, or sent bytes nobody asked for. While it is not, `cx`'s waker is
    /// woken when that changes.
    pub(crate) fn poll_idle_closed(&mut self, cx: &mut Context<'_>) -> bool {
        !matches!(self.poll_fill(cx), Poll::Pending)
    }

    /// Sends a request without a body and reads its answer's head; the
    /// answer's body owns the connection from there.
    pub(crate) async fn exchange(
        mut self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        deadline: Instant,
    ) -> Result<(Parts, Http1Body), ExchangeError> {
        let mut timer = match self.deadline.take() {
            Some(mut timer) => {
                timer.set(deadline);
                timer
            }
            None => LazyDeadline::new(deadline),
        };
        let answered = lazy_deadline::within(&mut timer, self.answer_head(method, uri, headers));
        match answered.await {
            None => Err(ExchangeError::TimedOut),
            Some(Err(e)) => Err(e),
            Some(Ok((parts, framing))) => {
                self.deadline = Some(timer);
                Ok((parts, Http1Body::new(self, framing)))
            }
        }
    }

    /// Lets go of the waker of the last request's task (see
    /// [`LazyDeadline::forget_waker`]): the connection is going idle.
    pub(crate) fn forget_deadline_waker(&mut self) {
        if let Some(timer) = &mut self.deadline {
            timer.forget_waker();
        }
    }

    /// Writes the request's head and reads the answer's.
    async fn answer_head(
        &mut self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(Parts, Framing), ExchangeError> {
        write_head(&mut self.head, method, uri, headers);
        let written = async {
            self.stream.write_all(&self.head).await?;
            self.stream.flush().await
        };
        written.await.map_err(ExchangeError::NoAnswer)?;
        let mut received = false;
        loop {
            if !self.buffer.is_empty() {
                received = true;
                match self.parse_head(method)? {
                    Parsed::Final(parts, framing) => return Ok((parts, framing)),
                    Parsed::Interim => continue,
                    Parsed::Partial if self.buffer.len() > MAX_HEAD => {
                        let refused = format!("the node's answer head is over {MAX_HEAD} bytes");
                        return Err(ExchangeError::Failed(refused.into()));
                    }
                    Parsed::Partial => {}
                }
            }
            self.buffer.reserve(READ_SIZE);
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) if !received => {
                    return Err(ExchangeError::NoAnswer(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the node closed the connection without answering",
                    )));
                }
                Ok(0) => {
                    let cut = "the node closed the connection in its answer's head";
                    return Err(ExchangeError::Failed(cut.into()));
                }
                Err(e) if !received => return Err(ExchangeError::NoAnswer(e)),
                Err(e) => return Err(ExchangeError::Failed(e.into())),
                Ok(_) => {}
            }
        }
    }

    /// An answer's head from the buffer, if it is all there. The head's
    /// bytes are split off and shared by the field values (not copied).
    fn parse_head(&mut self, method: &Method) -> Result<Parsed, BoxError> {
        // Uninitialized slots: zeroing 100 of them cost 3.2k instructions a
        // request (a memset), more than the parse.
        let mut slots = [const { MaybeUninit::uninit() }; MAX_FIELDS];
        let mut parsed = httparse::Response::new(&mut []);
        let config = httparse::ParserConfig::default();
        let length = match config.parse_response_with_uninit_headers(
            &mut parsed,
            &self.buffer,
            &mut slots,
        ) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
            Err(e) => return Err(format!("the node's answer is not HTTP/1.1: {e}").into()),
        };
        let status = StatusCode::from_u16(parsed.code.unwrap_or(0))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(
                "the node switched protocols (101) on a request that did not ask to".into(),
            );
        }
        if status.is_informational() {
            self.buffer.advance(length);
            return Ok(Parsed::Interim);
        }
        // hyper's client kept a reason phrase that is not the status's own,
        // and its server sends it on; so does this.
        let reason = parsed
            .reason
            .filter(|r| !r.is_empty() && Some(*r) != status.canonical_reason())
            .and_then(|r| ReasonPhrase::try_from(r.as_bytes().to_vec()).ok());
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let facts = Facts::scan(
            parsed
                .headers
                .iter()
                .map(|field| (field.name.as_bytes(), field.value)),
        );
        let mut framing = framing(method, status, &facts)?;
        if !facts.keeps_alive(version) {
            framing.keep_alive = false;
        }
        let start = self.buffer.as_ptr() as usize;
        let places: SmallVec<[Place; 24]> = parsed
            .headers
            .iter()
            .map(|field| Place::of(field, start))
            .collect();
        let head = self.buffer.split_to(length).freeze();
        let headers = header_map(&head, &places)?;
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = headers;
        if let Some(reason) = reason {
            response.extensions_mut().insert(reason);
        }
        Ok(Parsed::Final(response.into_parts().0, framing))
    }

    /// Reads what the node has sent into the buffer (`Ok(0)`: it closed).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buffer.capacity() == self.buffer.len() {
            self.buffer.reserve(READ_SIZE);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buffer)
    }
}

/// The request head as it goes on the wire. As hyper's client does, a
/// request without a body gets no framing fields of the gateway's own.
fn write_head(out: &mut Vec<u8>, method: &Method, uri: &Uri, headers: &HeaderMap) {
    out.clear();
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    for part in [method.as_str(), " ", target, " HTTP/1.1\r\n"] {
        out.extend_from_slice(part.as_bytes());
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How an answer's body is delimited, and whether the connection can serve
/// another request after it.
struct Framing {
    length: Length,
    keep_alive: bool,
}

fn framing(method: &Method, status: StatusCode, facts: &Facts) -> Result<Framing, BoxError> {
    let bodiless = method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let (length, keep_alive) = if bodiless {
        (Length::Known(0), true)
    } else if let Some(chunked) = facts.chunked {
        // A body in another coding ends only when the node closes.
        match chunked {
            true => (Length::Chunked(Chunk::SizeLine), true),
            false => (Length::UntilClose, false),
        }
    } else {
        match facts
            .length
            .map_err(|e| format!("the node's answer has {e}"))?
        {
            Some(n) => (Length::Known(n), true),
            None => (Length::UntilClose, false),
        }
    };
    Ok(Framing { length, keep_alive })
}

/// An answer's body, read from the connection as it is polled. When it
/// ends cleanly on a connection that stays open, the connection is left in
/// [`Http1Body::take_finished`] for the pool.
pub(crate) struct Http1Body {
    connection: Option<Http1Connection>,
    length: Length,
    keep_alive: bool,
    finished: Option<Http1Connection>,
}

impl Http1Body {
    fn new(connection: Http1Connection, framing: Framing) -> Self {
        let mut body = Http1Body {
            connection: Some(connection),
            length: framing.length,
            keep_alive: framing.keep_alive,
            finished: None,
        };
        if matches!(body.length, Length::Known(0)) {
            body.finish();
        }
        body
    }

    /// The connection, once the body has ended and it can serve another
    /// request.
    pub(crate) fn take_finished(&mut self) -> Option<Http1Connection> {
        self.finished.take()
    }

    fn finish(&mut self) {
        self.length = Length::Ended;
        if let Some(connection) = self.connection.take() {
            // Bytes past the body's end: the node does not frame its
            // answers as it says; the connection is not trusted again.
            if self.keep_alive && connection.buffer.is_empty() {
                self.finished = Some(connection);
            }
        }
    }
}

impl hyper::body::Body for Http1Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let step = match &mut this.connection {
                Some(connection) => this.length.step(&mut connection.buffer),
                None => Ok(Step::End),
            };
            let step = match step {
                Ok(step) => step,
                Err(e) => {
                    this.connection = None;
                    this.length = Length::Ended;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            match step {
                Step::Frame(frame) => {
                    if this.length.is_ended() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Step::End => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Step::NeedMore => {}
            }
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let error = match ready!(connection.poll_fill(cx)) {
                Ok(0) if matches!(this.length, Length::UntilClose) => {
                    this.connection = None;
                    this.length = Length::Ended;
                    return Poll::Ready(None);
                }
                Ok(0) => "the node closed the connection before its answer's body ended".into(),
                Ok(_) => continue,
                Err(e) => BoxError::from(e),
            };
            this.connection = None;
            this.length = Length::Ended;
            return Poll::Ready(Some(Err(error)));
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.length, Length::Ended)
    }

    fn size_hint(&self) -> SizeHint {
        self.length.size_hint()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_write(cx, data),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_flush(cx),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Stream::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
#[path = "http1_client_tests.rs"]
mod tests;
