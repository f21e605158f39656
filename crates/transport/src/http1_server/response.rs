//! An answer as the listener's HTTP/1.1 codec writes it: the head (with
//! the framing fields, `date` and `connection` a server adds, as hyper's
//! server added them) and the body, framed by its length, chunked, or
//! until the connection closes (RFC 9112 section 6).

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body as _, Frame};
use hyper::ext::ReasonPhrase;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Response, StatusCode, Version};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

use crate::body::{Body, BoxError};
use crate::http1_framing::{decimal, Facts};

/// Data frames up to this size are copied behind the head (one write);
/// larger ones are written on their own.
const COPY_UP_TO: usize = 16 * 1024;

/// What the request asked of its answer.
pub(super) struct Asked {
    pub(super) head: bool,
    pub(super) version: Version,
    /// The client keeps the connection (and the server means to).
    pub(super) keep_alive: bool,
    /// The client said `TE: trailers`.
    pub(super) takes_trailers: bool,
}

/// How an answer's body goes on the wire.
enum Encoding {
    /// None at all (HEAD, 1xx, 204, 304).
    Bodiless,
    Known(u64),
    Chunked,
    UntilClose,
}

/// Writes `response` to the client; whether the connection can serve
/// another request after it.
pub(super) async fn write(
    socket: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    response: Response<Body>,
    asked: &Asked,
) -> io::Result<bool> {
    let (parts, mut body) = response.into_parts();
    out.clear();
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match parts.extensions.get::<ReasonPhrase>() {
        Some(reason) => out.extend_from_slice(reason.as_bytes()),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    let (encoding, keep_alive) = head_fields(out, &parts.headers, status, asked, &body);
    // As hyper's server: trailers go to a client that takes them, and only
    // the fields the answer declared in its `Trailer` field.
    let declared = match asked.takes_trailers {
        true => declared_trailers(&parts.headers),
        false => Vec::new(),
    };
    if matches!(encoding, Encoding::Bodiless) {
        drop(body);
        socket.write_all(out).await?;
        return Ok(keep_alive);
    }
    let ended_well = write_body(socket, out, &mut body, encoding, &declared).await?;
    Ok(keep_alive && ended_well)
}

/// The head's fields, with the framing, `connection` and `date` fields the
/// server adds; how the body goes, and whether the connection is kept.
fn head_fields(
    out: &mut Vec<u8>,
    headers: &HeaderMap,
    status: StatusCode,
    asked: &Asked,
    body: &Body,
) -> (Encoding, bool) {
    let no_length = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let bodiless = no_length || asked.head;
    let mut declared = None;
    let mut has_date = false;
    let mut chunked = None;
    let mut says_close = false;
    for (name, value) in headers {
        if *name == header::CONTENT_LENGTH {
            if no_length {
                continue;
            }
            declared = decimal(value.as_bytes().trim_ascii());
        } else if *name == header::DATE {
            has_date = true;
        } else if *name == header::TRANSFER_ENCODING || *name == header::CONNECTION {
            let facts = Facts::scan(std::iter::once((
                name.as_str().as_bytes(),
                value.as_bytes(),
            )));
            chunked = facts.chunked.or(chunked);
            says_close |= facts.says_close();
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut keep_alive = asked.keep_alive && !says_close;
    let encoding = if bodiless {
        let exact = body.size_hint().exact();
        if asked.head && declared.is_none() && !no_length && exact.is_some_and(|n| n > 0) {
            content_length_field(out, exact.unwrap_or_default());
        }
        Encoding::Bodiless
    } else if let Some(chunked) = chunked {
        if chunked {
            Encoding::Chunked
        } else {
            keep_alive = false;
            Encoding::UntilClose
        }
    } else if let Some(length) = declared {
        Encoding::Known(length)
    } else if let Some(length) = body.size_hint().exact() {
        content_length_field(out, length);
        Encoding::Known(length)
    } else if asked.version == Version::HTTP_11 {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Encoding::Chunked
    } else {
        keep_alive = false;
        Encoding::UntilClose
    };
    if !keep_alive && !says_close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if keep_alive && asked.version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    (encoding, keep_alive)
}

/// The field names an answer's `Trailer` field declares.
fn declared_trailers(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut names = Vec::new();
    for value in headers.get_all(header::TRAILER) {
        for name in value.as_bytes().split(|b| *b == b',') {
            if let Ok(name) = HeaderName::from_bytes(name.trim_ascii()) {
                names.push(name);
            }
        }
    }
    names
}

fn content_length_field(out: &mut Vec<u8>, length: u64) {
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The body behind the head already in `out`, frame by frame: what is
/// ready at once goes out in one write with the head; the socket is
/// written before each wait. False if the body failed or did not match its
/// length: the client can tell only by the connection closing.
async fn write_body(
    socket: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    body: &mut Body,
    mut encoding: Encoding,
    declared: &[HeaderName],
) -> io::Result<bool> {
    loop {
        let frame = match frame_now(body) {
            Some(frame) => frame,
            None => {
                flush(socket, out).await?;
                poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
            }
        };
        let frame = match frame {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                tracing::debug!(error = %error, "an answer's body failed midway: connection closed");
                flush(socket, out).await?;
                return Ok(false);
            }
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                if !data_frame(socket, out, data, &mut encoding).await? {
                    flush(socket, out).await?;
                    return Ok(false);
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let (Ok(trailers), Encoding::Chunked) = (frame.into_trailers(), &encoding) {
            out.extend_from_slice(b"0\r\n");
            for (name, value) in trailers.iter().filter(|(name, _)| declared.contains(name)) {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            encoding = Encoding::Known(0);
        }
    }
    let whole = match encoding {
        Encoding::Chunked => {
            out.extend_from_slice(b"0\r\n\r\n");
            true
        }
        Encoding::Known(left) => left == 0,
        Encoding::UntilClose | Encoding::Bodiless => true,
    };
    flush(socket, out).await?;
    Ok(whole)
}

/// One data frame, framed; false if it overruns the declared length.
async fn data_frame(
    socket: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    data: Bytes,
    encoding: &mut Encoding,
) -> io::Result<bool> {
    if data.is_empty() {
        return Ok(true);
    }
    let fits = match encoding {
        Encoding::Known(left) if (data.len() as u64) > *left => false,
        Encoding::Known(left) => {
            *left -= data.len() as u64;
            true
        }
        Encoding::Chunked => {
            chunk_size_line(out, data.len());
            true
        }
        Encoding::UntilClose | Encoding::Bodiless => true,
    };
    if !fits {
        tracing::debug!("an answer's body is longer than its content-length: connection closed");
        return Ok(false);
    }
    if data.len() <= COPY_UP_TO {
        out.extend_from_slice(&data);
    } else {
        flush(socket, out).await?;
        socket.write_all(&data).await?;
    }
    if matches!(encoding, Encoding::Chunked) {
        out.extend_from_slice(b"\r\n");
    }
    Ok(true)
}

/// A chunk's size in hex, and its CRLF.
fn chunk_size_line(out: &mut Vec<u8>, size: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut rest = size;
    loop {
        at -= 1;
        digits[at] = DIGITS[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

async fn flush(socket: &mut OwnedWriteHalf, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        socket.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// The body's next frame if it is there without waiting (`None`: not yet).
fn frame_now(body: &mut Body) -> Option<Option<Result<Frame<Bytes>, BoxError>>> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(frame) => Some(frame),
        Poll::Pending => None,
    }
}

thread_local! {
    /// The `date` field's value, formatted once a second per worker.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
}

fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|date| {
        let mut date = date.borrow_mut();
        if date.0 != second || date.1.is_empty() {
            *date = (second, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(date.1.as_bytes());
    });
}
