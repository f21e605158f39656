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
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::response::Parts;
use hyper::{Method, Response, StatusCode, Uri, Version};
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::body::BoxError;
use crate::connector::CountedConnection;

/// hyper's own limits on a head it reads, kept so that nothing an upstream
/// could send before is refused now.
const MAX_HEAD: usize = 400 * 1024;
const MAX_FIELDS: usize = 100;
/// A chunk-size line (with its extensions) or a trailer section longer than
/// this is refused: nothing legitimate comes near it.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;
/// Room made in the read buffer before each read.
const READ_SIZE: usize = 16 * 1024;

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
}

/// Why an exchange failed.
pub(crate) enum ExchangeError {
    /// The node sent nothing back: it closed (or reset) the connection. On
    /// a reused connection that is the node closing it while it was idle,
    /// and an idempotent request can be sent again on another.
    NoAnswer(io::Error),
    Failed(BoxError),
}

impl From<BoxError> for ExchangeError {
    fn from(error: BoxError) -> Self {
        ExchangeError::Failed(error)
    }
}

/// Where a field of a parsed head is in the read buffer.
struct Place {
    name: usize,
    name_len: usize,
    value: usize,
    value_len: usize,
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
    ) -> Result<(Parts, Http1Body), ExchangeError> {
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
                    Parsed::Final(parts, framing) => {
                        return Ok((parts, Http1Body::new(self, framing)));
                    }
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
        // Where each field is, as offsets: the parse borrows the buffer,
        // which has to be split before the values can share it.
        let start = self.buffer.as_ptr() as usize;
        let offset = |part: &[u8]| part.as_ptr() as usize - start;
        let places: SmallVec<[Place; 24]> = parsed
            .headers
            .iter()
            .map(|field| Place {
                name: offset(field.name.as_bytes()),
                name_len: field.name.len(),
                value: offset(field.value),
                value_len: field.value.len(),
            })
            .collect();
        let head = self.buffer.split_to(length).freeze();
        let mut headers = HeaderMap::with_capacity(places.len());
        for place in &places {
            headers.append(
                HeaderName::from_bytes(&head[place.name..place.name + place.name_len])?,
                HeaderValue::from_maybe_shared(
                    head.slice(place.value..place.value + place.value_len),
                )?,
            );
        }
        let mut framing = framing(method, status, &headers)?;
        if !keeps_alive(version, &headers) {
            framing.keep_alive = false;
        }
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

enum Length {
    Known(u64),
    Chunked(Chunk),
    UntilClose,
    Ended,
}

/// Where a chunked body's decoding is.
enum Chunk {
    SizeLine,
    Data(u64),
    DataEnd,
    Trailers,
}

fn framing(method: &Method, status: StatusCode, headers: &HeaderMap) -> Result<Framing, BoxError> {
    let bodiless = method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if bodiless {
        return Ok(Framing {
            length: Length::Known(0),
            keep_alive: true,
        });
    }
    if let Some(codings) = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
    {
        let last = codings.as_bytes().rsplit(|b| *b == b',').next();
        let chunked = last.is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        // A body in another coding ends only when the node closes.
        return Ok(match chunked {
            true => Framing {
                length: Length::Chunked(Chunk::SizeLine),
                keep_alive: true,
            },
            false => Framing {
                length: Length::UntilClose,
                keep_alive: false,
            },
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|b| *b == b',') {
            let n = decimal(part.trim_ascii())
                .ok_or("the node's answer has a Content-Length that is not a number")?;
            if length.is_some_and(|l| l != n) {
                return Err("the node's answer has Content-Length values that disagree".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => Framing {
            length: Length::Known(n),
            keep_alive: true,
        },
        None => Framing {
            length: Length::UntilClose,
            keep_alive: false,
        },
    })
}

/// HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes it
/// unless told to keep it.
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let says = |token: &[u8]| {
        headers.get_all(header::CONNECTION).iter().any(|value| {
            value
                .as_bytes()
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
        })
    };
    match version {
        Version::HTTP_10 => says(b"keep-alive"),
        _ => !says(b"close"),
    }
}

fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| match d {
        b'0'..=b'9' => Some(n * 10 + u64::from(d - b'0')),
        _ => None,
    })
}

/// A chunk-size line's size (hex digits, then optional extensions).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        let digit = (*d as char).to_digit(16)?;
        Some(n * 16 + u64::from(digit))
    })
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

/// What the buffered bytes gave the body.
enum Step {
    Frame(Frame<Bytes>),
    /// Framing bytes consumed; look again.
    Again,
    NeedMore,
    End,
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

    /// The next step the buffered bytes allow.
    fn step(&mut self) -> Result<Step, BoxError> {
        let Some(connection) = self.connection.as_mut() else {
            return Ok(Step::End);
        };
        let buffer = &mut connection.buffer;
        let step = match &mut self.length {
            Length::Ended => Step::End,
            Length::Known(remaining) | Length::Chunked(Chunk::Data(remaining)) => {
                if buffer.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let take = buffer
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                *remaining -= take as u64;
                let data = buffer.split_to(take).freeze();
                match self.length {
                    Length::Known(0) => self.finish(),
                    Length::Chunked(Chunk::Data(0)) => {
                        self.length = Length::Chunked(Chunk::DataEnd);
                    }
                    _ => {}
                }
                Step::Frame(Frame::data(data))
            }
            Length::UntilClose if buffer.is_empty() => Step::NeedMore,
            Length::UntilClose => Step::Frame(Frame::data(buffer.split().freeze())),
            Length::Chunked(chunk) => return decode_chunked(buffer, chunk),
        };
        Ok(step)
    }
}

/// A chunked body's framing: its size lines, the CRLF after each chunk's
/// data, and the trailer section. (The data itself is taken in `step`.)
fn decode_chunked(buffer: &mut BytesMut, chunk: &mut Chunk) -> Result<Step, BoxError> {
    match chunk {
        Chunk::SizeLine => {
            let Some(end) = buffer.iter().position(|b| *b == b'\n') else {
                if buffer.len() > MAX_CHUNK_LINE {
                    return Err("a chunk-size line from the node is too long".into());
                }
                return Ok(Step::NeedMore);
            };
            let line = buffer[..end]
                .strip_suffix(b"\r")
                .ok_or("a chunk-size line without CRLF")?;
            let size = chunk_size(line).ok_or("a chunk size from the node is not a number")?;
            buffer.advance(end + 1);
            *chunk = if size == 0 {
                Chunk::Trailers
            } else {
                Chunk::Data(size)
            };
            Ok(Step::Again)
        }
        Chunk::DataEnd if buffer.len() < 2 => Ok(Step::NeedMore),
        Chunk::DataEnd => {
            if &buffer[..2] != b"\r\n" {
                return Err("a chunk from the node is longer than its size".into());
            }
            buffer.advance(2);
            *chunk = Chunk::SizeLine;
            Ok(Step::Again)
        }
        Chunk::Trailers if buffer.starts_with(b"\r\n") => {
            buffer.advance(2);
            Ok(Step::End)
        }
        Chunk::Trailers => {
            let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let (length, fields) = match httparse::parse_headers(buffer, &mut slots) {
                Ok(httparse::Status::Complete(parsed)) => parsed,
                Ok(httparse::Status::Partial) if buffer.len() > MAX_TRAILERS => {
                    return Err("the node's trailers are too large".into())
                }
                Ok(httparse::Status::Partial) => return Ok(Step::NeedMore),
                Err(e) => return Err(format!("the node's trailers are malformed: {e}").into()),
            };
            let mut trailers = HeaderMap::with_capacity(fields.len());
            for field in fields.iter() {
                trailers.append(
                    HeaderName::from_bytes(field.name.as_bytes())?,
                    HeaderValue::from_bytes(field.value)?,
                );
            }
            buffer.advance(length);
            Ok(Step::Frame(Frame::trailers(trailers)))
        }
        Chunk::Data(_) => unreachable!("chunk data is taken in Http1Body::step"),
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
            let step = match this.step() {
                Ok(step) => step,
                Err(e) => {
                    this.connection = None;
                    this.length = Length::Ended;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            match step {
                Step::Frame(frame) => {
                    if frame.is_trailers() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Step::Again => continue,
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
        match self.length {
            Length::Known(n) => SizeHint::with_exact(n),
            Length::Ended => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
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
