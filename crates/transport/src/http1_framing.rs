//! What HTTP/1.1's two sides share, for the codec of the upstream side
//! (`http1_client.rs`) and the listener's (`http1_server.rs`): the limits
//! on a head, a parsed head's fields turned into a header map without
//! copying their bytes, and a body's framing (RFC 9112 section 6 and 7.1:
//! a length, chunked with extensions and trailers, or until the connection
//! closes) decoded from a read buffer.

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::Version;

use crate::body::BoxError;

/// hyper's own limits on a head it reads, kept so that nothing a client or
/// a node could send before is refused now.
pub(crate) const MAX_HEAD: usize = 400 * 1024;
pub(crate) const MAX_FIELDS: usize = 100;
/// A chunk-size line (with its extensions) or a trailer section longer than
/// this is refused: nothing legitimate comes near it.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;
/// Room made in a read buffer before each read.
pub(crate) const READ_SIZE: usize = 16 * 1024;

/// Where a field of a parsed head is in the read buffer, as offsets: the
/// parse borrows the buffer, which has to be split before the values can
/// share its bytes.
pub(crate) struct Place {
    name: usize,
    name_len: usize,
    value: usize,
    value_len: usize,
}

impl Place {
    /// `field`'s place in the buffer starting at `start`.
    pub(crate) fn of(field: &httparse::Header<'_>, start: usize) -> Place {
        Place {
            name: field.name.as_ptr() as usize - start,
            name_len: field.name.len(),
            value: field.value.as_ptr() as usize - start,
            value_len: field.value.len(),
        }
    }
}

/// The fields at `places` in `head` (the head's bytes, split off the read
/// buffer), their values sharing `head` rather than copied.
pub(crate) fn header_map(head: &Bytes, places: &[Place]) -> Result<HeaderMap, BoxError> {
    let mut headers = HeaderMap::with_capacity(places.len());
    for place in places {
        let value = head.slice(place.value..place.value + place.value_len);
        // Checking the value's bytes again cost 700 instructions a request;
        // hyper's parser skips the check too.
        #[allow(unsafe_code)]
        // SAFETY: httparse admits in a field value only HTAB, SP, visible
        // ASCII and obs-text (0x80-0xFF), exactly the bytes `HeaderValue`
        // allows, and `value` is such a field value (the trailers' path
        // checks its values).
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(value) };
        headers.append(
            HeaderName::from_bytes(&head[place.name..place.name + place.name_len])?,
            value,
        );
    }
    Ok(headers)
}

/// What a head's framing and connection handling need of its fields,
/// found in one pass over them as they were parsed: each lookup in a header
/// map hashes the name, and four of them cost more than the parse.
pub(crate) struct Facts {
    /// With a `Transfer-Encoding`: whether its last coding is `chunked`.
    pub(crate) chunked: Option<bool>,
    /// The `Content-Length`, or why it is unusable (not a number, values
    /// that disagree).
    pub(crate) length: Result<Option<u64>, &'static str>,
    /// `Connection` says `close` / `keep-alive`.
    close: bool,
    keep_alive: bool,
    /// An `Upgrade` or `Expect` field is there.
    pub(crate) upgrade_or_expect: bool,
    /// `TE` says `trailers`: the client takes trailer fields.
    pub(crate) takes_trailers: bool,
}

impl Facts {
    pub(crate) fn scan<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Facts {
        let mut facts = Facts {
            chunked: None,
            length: Ok(None),
            close: false,
            keep_alive: false,
            upgrade_or_expect: false,
            takes_trailers: false,
        };
        for (name, value) in fields {
            if name.eq_ignore_ascii_case(b"content-length") {
                facts.length = facts.length.and_then(|known| add_length(known, value));
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = value.rsplit(|b| *b == b',').next().unwrap_or_default();
                facts.chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                    facts.close |= token.eq_ignore_ascii_case(b"close");
                    facts.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case(b"upgrade") || name.eq_ignore_ascii_case(b"expect")
            {
                facts.upgrade_or_expect = true;
            } else if name.eq_ignore_ascii_case(b"te") {
                facts.takes_trailers |= value
                    .split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
            }
        }
        facts
    }

    /// HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes
    /// it unless told to keep it.
    pub(crate) fn keeps_alive(&self, version: Version) -> bool {
        match version {
            Version::HTTP_10 => self.keep_alive && !self.close,
            _ => !self.close,
        }
    }

    /// Whether `Connection` says `close`.
    pub(crate) fn says_close(&self) -> bool {
        self.close
    }
}

/// A `Content-Length` field's values (repeated ones must agree) after
/// those seen before.
fn add_length(known: Option<u64>, value: &[u8]) -> Result<Option<u64>, &'static str> {
    let mut length = known;
    for part in value.split(|b| *b == b',') {
        let n = decimal(part.trim_ascii()).ok_or("a Content-Length that is not a number")?;
        if length.is_some_and(|l| l != n) {
            return Err("Content-Length values that disagree");
        }
        length = Some(n);
    }
    Ok(length)
}

pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| match d {
        b'0'..=b'9' => Some(n * 10 + u64::from(d - b'0')),
        _ => None,
    })
}

/// A chunk-size line's size (hex digits, then optional extensions).
pub(crate) fn chunk_size(line: &[u8]) -> Option<u64> {
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

/// How much of a body is left, and how it is delimited.
#[derive(Debug)]
pub(crate) enum Length {
    Known(u64),
    Chunked(Chunk),
    UntilClose,
    Ended,
}

/// Where a chunked body's decoding is.
#[derive(Debug)]
pub(crate) enum Chunk {
    SizeLine,
    Data(u64),
    DataEnd,
    Trailers,
}

/// What the buffered bytes gave a body.
pub(crate) enum Step {
    Frame(Frame<Bytes>),
    NeedMore,
    /// The body is over (the length is now [`Length::Ended`]).
    End,
}

impl Length {
    pub(crate) fn is_ended(&self) -> bool {
        matches!(self, Length::Ended)
    }

    /// What a body with this much left can say of its size.
    pub(crate) fn size_hint(&self) -> SizeHint {
        match self {
            Length::Known(n) => SizeHint::with_exact(*n),
            Length::Ended => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }

    /// The next frame the bytes in `buffer` give, taking them from it. A
    /// frame that ends the body leaves the length [`Length::Ended`].
    pub(crate) fn step(&mut self, buffer: &mut BytesMut) -> Result<Step, BoxError> {
        loop {
            match self {
                Length::Ended => return Ok(Step::End),
                Length::Known(0) => {
                    *self = Length::Ended;
                    return Ok(Step::End);
                }
                Length::Known(remaining) | Length::Chunked(Chunk::Data(remaining)) => {
                    if buffer.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let take = buffer
                        .len()
                        .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                    *remaining -= take as u64;
                    let data = buffer.split_to(take).freeze();
                    match self {
                        Length::Known(0) => *self = Length::Ended,
                        Length::Chunked(Chunk::Data(0)) => *self = Length::Chunked(Chunk::DataEnd),
                        _ => {}
                    }
                    return Ok(Step::Frame(Frame::data(data)));
                }
                Length::UntilClose if buffer.is_empty() => return Ok(Step::NeedMore),
                Length::UntilClose => {
                    return Ok(Step::Frame(Frame::data(buffer.split().freeze())));
                }
                Length::Chunked(chunk) => match decode_chunked(buffer, chunk)? {
                    Decoded::Again => continue,
                    Decoded::NeedMore => return Ok(Step::NeedMore),
                    Decoded::End => {
                        *self = Length::Ended;
                        return Ok(Step::End);
                    }
                    Decoded::Trailers(trailers) => {
                        *self = Length::Ended;
                        return Ok(Step::Frame(Frame::trailers(trailers)));
                    }
                },
            }
        }
    }
}

enum Decoded {
    /// Framing bytes consumed; look again.
    Again,
    NeedMore,
    End,
    Trailers(HeaderMap),
}

/// A chunked body's framing: its size lines, the CRLF after each chunk's
/// data, and the trailer section. (The data itself is taken in `step`.)
fn decode_chunked(buffer: &mut BytesMut, chunk: &mut Chunk) -> Result<Decoded, BoxError> {
    match chunk {
        Chunk::SizeLine => {
            let Some(end) = buffer.iter().position(|b| *b == b'\n') else {
                if buffer.len() > MAX_CHUNK_LINE {
                    return Err("a chunk-size line is too long".into());
                }
                return Ok(Decoded::NeedMore);
            };
            let line = buffer[..end]
                .strip_suffix(b"\r")
                .ok_or("a chunk-size line without CRLF")?;
            let size = chunk_size(line).ok_or("a chunk size is not a number")?;
            buffer.advance(end + 1);
            *chunk = if size == 0 {
                Chunk::Trailers
            } else {
                Chunk::Data(size)
            };
            Ok(Decoded::Again)
        }
        Chunk::DataEnd if buffer.len() < 2 => Ok(Decoded::NeedMore),
        Chunk::DataEnd => {
            if &buffer[..2] != b"\r\n" {
                return Err("a chunk is longer than its size".into());
            }
            buffer.advance(2);
            *chunk = Chunk::SizeLine;
            Ok(Decoded::Again)
        }
        Chunk::Trailers if buffer.starts_with(b"\r\n") => {
            buffer.advance(2);
            Ok(Decoded::End)
        }
        Chunk::Trailers => {
            let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let (length, fields) = match httparse::parse_headers(buffer, &mut slots) {
                Ok(httparse::Status::Complete(parsed)) => parsed,
                Ok(httparse::Status::Partial) if buffer.len() > MAX_TRAILERS => {
                    return Err("the trailers are too large".into())
                }
                Ok(httparse::Status::Partial) => return Ok(Decoded::NeedMore),
                Err(e) => return Err(format!("the trailers are malformed: {e}").into()),
            };
            let mut trailers = HeaderMap::with_capacity(fields.len());
            for field in fields.iter() {
                trailers.append(
                    HeaderName::from_bytes(field.name.as_bytes())?,
                    HeaderValue::from_bytes(field.value)?,
                );
            }
            buffer.advance(length);
            Ok(Decoded::Trailers(trailers))
        }
        Chunk::Data(_) => unreachable!("chunk data is taken in Length::step"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_strictly() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"1234"), Some(1234));
        assert_eq!(decimal(b"+1"), None);
        assert_eq!(decimal(b""), None);
        assert_eq!(decimal(b"99999999999999999999"), None);
        assert_eq!(chunk_size(b"1f"), Some(31));
        assert_eq!(chunk_size(b"A;name=value"), Some(10));
        assert_eq!(chunk_size(b"g"), None);
        assert_eq!(chunk_size(b""), None);
        assert_eq!(chunk_size(b"1000000000000000"), None);
    }
}
