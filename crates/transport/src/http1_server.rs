//! HTTP/1.1 on a plain listener, read and written by the connection's own
//! task (issue 57's design step 2, docs/benchmarks.md "Issue 57, the data
//! plane's design step"; docs/gateway.md "Listeners").
//!
//! hyper's server parses a head into its own structures, hands the request
//! to the service through its dispatcher, and encodes the answer through
//! another layer of buffers; here the connection's task parses the head
//! with `httparse` (the parser hyper uses), calls the handler, and writes
//! the answer's head and body itself, in one write when the body is there.
//!
//! What this codec does not take it hands to hyper, with the bytes it has
//! read, for the rest of the connection: an HTTP/2 connection preface
//! (h2c), and a request that asks for more than a request and its answer
//! (an `Upgrade`, `CONNECT`, `Expect: 100-continue`). TLS connections are
//! hyper's throughout (`listener.rs`).
//!
//! What it keeps of hyper's server: the head limits (400 KiB, 100 fields:
//! 431), a request body's framing (a length, or chunked; both at once, or
//! a coding other than chunked last, is refused with 400 as RFC 9112
//! section 6.3 allows, closing the door to request smuggling), keep-alive
//! by version and `Connection`, a client that closes its side while its
//! bodiless request is handled leaving (the handler's future is dropped),
//! and the header read timeout: a silent connection is closed, a half-sent
//! head gets 408 (on every request of a connection, not only its first,
//! which hyper could not tell).

use std::future::{poll_fn, Future};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use hyper::http::request::Parts;
use hyper::{Method, Request, Uri, Version};
use smallvec::SmallVec;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

use crate::body::RequestBody;
use crate::head_deadline::REQUEST_TIMEOUT;
use crate::http1_framing::{
    header_map, Chunk, Facts, Length, Place, Step, MAX_FIELDS, MAX_HEAD, READ_SIZE,
};
use crate::lazy_deadline::{self, LazyDeadline};
use crate::listener::{Connection, Handler};

mod request_body;
mod response;

pub use request_body::Http1RequestBody;
pub(crate) use request_body::Prefixed;
use request_body::{Reader, Returned};
use response::Asked;

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// How long, and how much, the unread rest of a request body is read and
/// thrown away so that the connection can serve the next request (or close
/// without a reset overtaking its answer), as `body::ClientBody` lingers on
/// hyper's connections.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 8 << 20;

/// How a connection served by this codec ended.
pub(crate) enum Served {
    Closed,
    /// Hyper's from here: the bytes read so far are in front of the rest.
    HandOff(Prefixed),
}

/// What reading a request head came to. (Returned once per request and
/// matched at once: boxing the head would cost an allocation each time.)
#[allow(clippy::large_enum_variant)]
enum HeadRead {
    Request(Head),
    /// The client closed, went silent past the timeout, or the server is
    /// stopping with nothing asked.
    Closed,
    /// Refused: these bytes are the answer, then the connection closes.
    Refused(&'static [u8]),
    HandOff,
}

/// A parsed request head, and how its body is framed.
struct Head {
    parts: Parts,
    length: Length,
    keep_alive: bool,
    takes_trailers: bool,
}

/// Serves the HTTP/1.1 requests of a plain connection until it closes, or
/// until one is hyper's to serve.
pub(crate) async fn serve<H: Handler>(
    stream: TcpStream,
    handler: &H,
    connection: &Connection,
    header_read_timeout: Duration,
    stopping: &mut watch::Receiver<bool>,
) -> Served {
    let (socket, mut write) = stream.into_split();
    let mut reader = Some(Reader {
        socket,
        buffer: BytesMut::with_capacity(READ_SIZE),
    });
    let mut out = Vec::with_capacity(1024);
    let mut timer = HeadTimer::new(header_read_timeout);
    let stopped = stopping.wait_for(|stop| *stop);
    tokio::pin!(stopped);
    let mut first = true;
    loop {
        let at_home = reader
            .as_mut()
            .expect("the read side is home between requests");
        let head = match read_head(at_home, &mut timer, stopped.as_mut(), first).await {
            HeadRead::Request(head) => head,
            HeadRead::Closed => return Served::Closed,
            HeadRead::Refused(answer) => {
                let _ = write.write_all(answer).await;
                return Served::Closed;
            }
            HeadRead::HandOff => {
                let Reader { socket, buffer } = reader.take().expect("home");
                return match socket.reunite(write) {
                    Ok(stream) => Served::HandOff(Prefixed::new(buffer.freeze(), stream)),
                    Err(_) => Served::Closed,
                };
            }
        };
        first = false;
        let asked = Asked {
            head: head.parts.method == Method::HEAD,
            version: head.parts.version,
            keep_alive: head.keep_alive,
            takes_trailers: head.takes_trailers,
        };
        // A body takes the read side with it; it comes back when the body
        // ends or is dropped.
        let (body, returning) = match head.length {
            Length::Known(0) => (RequestBody::empty(), None),
            length => {
                let (home, returning) = oneshot::channel();
                let taken = reader.take().expect("home");
                let body = Http1RequestBody::new(taken, length, home);
                (RequestBody::http1(body), Some(returning))
            }
        };
        // Pinned where it is made: the handler's future is large (the
        // gateway's is tens of kilobytes), and every move of it is a copy.
        let request = Request::from_parts(head.parts, body);
        let handled = std::pin::pin!(handler.handle(request, connection.clone()));
        let response = match reader.as_mut() {
            Some(at_home) => match unless_client_leaves(handled, at_home).await {
                Some(response) => response,
                None => return Served::Closed,
            },
            None => handled.await,
        };
        let keep_alive = match response::write(&mut write, &mut out, response, &asked).await {
            Ok(keep_alive) => keep_alive,
            Err(_) => return Served::Closed,
        };
        if let Some(returning) = returning {
            let Ok(Ok(Returned {
                reader: back,
                length,
            })) = tokio::time::timeout(LINGER_TIME, returning).await
            else {
                return Served::Closed; // the body is still held, or failed
            };
            let back = reader.insert(back);
            if !length.is_ended() && !drain(back, length).await {
                return Served::Closed;
            }
        }
        if !keep_alive {
            return Served::Closed;
        }
    }
}

/// Reads until a request head is complete, and parses it.
async fn read_head<S: Future>(
    reader: &mut Reader,
    timer: &mut HeadTimer,
    mut stopped: Pin<&mut S>,
    first: bool,
) -> HeadRead {
    timer.start();
    poll_fn(|cx| loop {
        if !reader.buffer.is_empty() {
            if first && reader.buffer.starts_with(b"PRI ") {
                return Poll::Ready(HeadRead::HandOff);
            }
            match parse(&mut reader.buffer) {
                Ok(Some(parsed)) => return Poll::Ready(parsed),
                Ok(None) if reader.buffer.len() > MAX_HEAD => {
                    return Poll::Ready(HeadRead::Refused(TOO_LARGE));
                }
                Ok(None) => {}
                Err(refused) => return Poll::Ready(HeadRead::Refused(refused)),
            }
        }
        match reader.poll_fill(cx) {
            Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(HeadRead::Closed),
            Poll::Ready(Ok(_)) => continue,
            Poll::Pending => {}
        }
        if reader.buffer.is_empty() && stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(HeadRead::Closed);
        }
        if timer.poll_expired(cx) {
            return Poll::Ready(match reader.buffer.is_empty() {
                true => HeadRead::Closed,
                false => HeadRead::Refused(REQUEST_TIMEOUT),
            });
        }
        return Poll::Pending;
    })
    .await
}

/// A request head from the front of `buffer`, if it is all there: the
/// head's bytes are split off and shared by the request's fields. A request
/// hyper is to serve is left in the buffer.
fn parse(buffer: &mut BytesMut) -> Result<Option<HeadRead>, &'static [u8]> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut []);
    let config = httparse::ParserConfig::default();
    let length = match config.parse_request_with_uninit_headers(&mut parsed, buffer, &mut slots) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_LARGE),
        Err(_) => return Err(BAD_REQUEST),
    };
    let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
        .map_err(|_| BAD_REQUEST)?;
    let facts = Facts::scan(
        parsed
            .headers
            .iter()
            .map(|field| (field.name.as_bytes(), field.value)),
    );
    if method == Method::CONNECT || facts.upgrade_or_expect {
        return Ok(Some(HeadRead::HandOff));
    }
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let start = buffer.as_ptr() as usize;
    let target = parsed.path.unwrap_or_default();
    let target = (target.as_ptr() as usize - start, target.len());
    let places: SmallVec<[Place; 24]> = parsed
        .headers
        .iter()
        .map(|field| Place::of(field, start))
        .collect();
    let head = buffer.split_to(length).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target.0..target.0 + target.1))
        .map_err(|_| BAD_REQUEST)?;
    let headers = header_map(&head, &places).map_err(|_| BAD_REQUEST)?;
    let length = match facts.chunked {
        Some(_) if version == Version::HTTP_10 => return Err(BAD_REQUEST),
        Some(_) if !matches!(facts.length, Ok(None)) => return Err(BAD_REQUEST),
        Some(true) => Length::Chunked(Chunk::SizeLine),
        Some(false) => return Err(BAD_REQUEST),
        None => match facts.length {
            Ok(length) => Length::Known(length.unwrap_or(0)),
            Err(_) => return Err(BAD_REQUEST),
        },
    };
    let keep_alive = facts.keeps_alive(version);
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(Some(HeadRead::Request(Head {
        parts: request.into_parts().0,
        length,
        keep_alive,
        takes_trailers: facts.takes_trailers,
    })))
}

/// The handler's answer, unless the client closes its side (or resets the
/// connection) first, as hyper's server noticed: the handler's future is
/// dropped then, which cancels what it was waiting on. Bytes that come
/// meanwhile (a pipelined request) are kept for later.
async fn unless_client_leaves<F: Future>(
    mut handled: Pin<&mut F>,
    reader: &mut Reader,
) -> Option<F::Output> {
    poll_fn(|cx| {
        if let Poll::Ready(answer) = handled.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        while reader.buffer.len() <= MAX_HEAD {
            match reader.poll_fill(cx) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => break,
            }
        }
        Poll::Pending
    })
    .await
}

/// Reads and throws away the rest of a request body the handler left
/// unread, for a while; whether it all came.
async fn drain(reader: &mut Reader, mut length: Length) -> bool {
    let drained = async {
        let mut read = 0;
        loop {
            match length.step(&mut reader.buffer) {
                Ok(Step::Frame(frame)) => {
                    read += frame.data_ref().map_or(0, |data| data.len());
                    if read > LINGER_BYTES {
                        return false;
                    }
                }
                Ok(Step::End) => return true,
                Ok(Step::NeedMore) => match poll_fn(|cx| reader.poll_fill(cx)).await {
                    Ok(0) | Err(_) => return false,
                    Ok(_) => {}
                },
                Err(_) => return false,
            }
        }
    };
    tokio::time::timeout(LINGER_TIME, drained)
        .await
        .unwrap_or(false)
}

/// The header read timeout, without touching the timer wheel per request:
/// a request only moves the deadline; the timer, when it fires early, is
/// set again to the deadline as it is then.
/// The header read timeout of one connection: a deadline set again for
/// every head awaited (lazy_deadline.rs).
struct HeadTimer {
    deadline: LazyDeadline,
    timeout: Duration,
}

impl HeadTimer {
    fn new(timeout: Duration) -> Self {
        HeadTimer {
            deadline: LazyDeadline::new(lazy_deadline::from_now(timeout)),
            timeout,
        }
    }

    /// A head is awaited from now.
    fn start(&mut self) {
        self.deadline.set(lazy_deadline::from_now(self.timeout));
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.poll_expired(cx)
    }
}

#[cfg(test)]
#[path = "http1_server_tests.rs"]
mod tests;
