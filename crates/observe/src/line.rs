//! An access-log [`Entry`] as text: a JSON line or a text line with named
//! fields. Written by hand rather than through serde and `format!`: every
//! request formats its own line, and a line's cost is part of what each
//! request costs the node (docs/benchmarks.md measures it). Numbers and
//! ids are written into stack buffers copied in fixed-size pieces, times
//! in milliseconds are integers of microseconds with a point put in, and
//! the date is worked out once per second.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use crate::access_log::Entry;

/// The wall clock and the monotonic clock read together (once a second
/// per thread, access_log.rs): a request's arrival on the wall clock is
/// the pair's wall time moved by how far (monotonically) the arrival is
/// from the pair's reading.
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    wall: SystemTime,
    pub(crate) instant: Instant,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        Clock {
            wall: SystemTime::now(),
            instant: Instant::now(),
        }
    }

    /// When `began` was on the wall clock (before or after the pair was read).
    pub(crate) fn wall(&self, began: Instant) -> SystemTime {
        match began.checked_duration_since(self.instant) {
            Some(after) => self.wall + after,
            None => self.wall - self.instant.saturating_duration_since(began),
        }
    }
}

/// One JSON object and a newline; the fields in the order of
/// docs/observability.md.
pub(crate) fn json(entry: &Entry, time: SystemTime, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"time\":\"");
    rfc3339(time, out);
    out.extend_from_slice(b"\",\"request_id\":");
    integer(entry.request_id, out);
    out.extend_from_slice(b",\"client\":");
    match entry.client {
        Some(client) => {
            out.push(b'"');
            address(client, out);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    field_str(b"method", &entry.method, out);
    field_str(b"host", &entry.host, out);
    field_str(b"path", &entry.path, out);
    field_str(b"protocol", entry.protocol, out);
    out.extend_from_slice(b",\"status\":");
    integer(u64::from(entry.status), out);
    out.extend_from_slice(b",\"bytes_in\":");
    integer(entry.bytes_in, out);
    out.extend_from_slice(b",\"bytes_out\":");
    integer(entry.bytes_out, out);
    out.extend_from_slice(b",\"duration_ms\":");
    millis(entry.duration, out);
    field_str(b"route", entry.route.as_deref().unwrap_or(""), out);
    field_opt(b"upstream", entry.upstream.as_deref(), out);
    out.extend_from_slice(b",\"upstream_ms\":");
    match entry.upstream_time {
        Some(time) => millis(time, out),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"filters\":[");
    for (i, filter) in entry.filters.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        string(&filter.name, out);
        out.extend_from_slice(b",\"ms\":");
        millis(filter.time, out);
        out.push(b'}');
    }
    out.push(b']');
    field_opt(b"local_response", entry.local_response.as_deref(), out);
    field_opt(b"error", entry.error.as_deref(), out);
    out.extend_from_slice(b",\"trace_id\":");
    match &entry.trace_id {
        Some(id) => {
            out.push(b'"');
            hex(id, out);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b"}\n");
}

/// `client [time] "METHOD hostpath PROTO" status bytes_out name=value...`
/// and a newline: nginx's combined look, the rest as named fields (`-`
/// for none). Values are written as they are but for control characters,
/// spaces and quotes in them, which are `\xHH`-escaped (so a field never
/// runs into the next one).
pub(crate) fn text(entry: &Entry, time: SystemTime, out: &mut Vec<u8>) {
    match entry.client {
        Some(client) => address(client, out),
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" [");
    rfc3339(time, out);
    out.extend_from_slice(b"] \"");
    bare(&entry.method, out);
    out.push(b' ');
    bare(&entry.host, out);
    bare(&entry.path, out);
    out.push(b' ');
    out.extend_from_slice(entry.protocol.as_bytes());
    out.extend_from_slice(b"\" ");
    integer(u64::from(entry.status), out);
    out.push(b' ');
    integer(entry.bytes_out, out);
    out.extend_from_slice(b" in=");
    integer(entry.bytes_in, out);
    out.extend_from_slice(b" ms=");
    millis(entry.duration, out);
    out.extend_from_slice(b" route=");
    bare_or_dash(entry.route.as_deref(), out);
    out.extend_from_slice(b" upstream=");
    bare_or_dash(entry.upstream.as_deref(), out);
    out.extend_from_slice(b" upstream_ms=");
    match entry.upstream_time {
        Some(time) => millis(time, out),
        None => out.push(b'-'),
    }
    out.extend_from_slice(b" filters=");
    if entry.filters.is_empty() {
        out.push(b'-');
    }
    for (i, filter) in entry.filters.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        bare(&filter.name, out);
        out.push(b':');
        millis(filter.time, out);
    }
    out.extend_from_slice(b" local=");
    bare_or_dash(entry.local_response.as_deref(), out);
    out.extend_from_slice(b" error=");
    bare_or_dash(entry.error.as_deref(), out);
    out.extend_from_slice(b" id=");
    integer(entry.request_id, out);
    out.extend_from_slice(b" trace=");
    match &entry.trace_id {
        Some(id) => hex(id, out),
        None => out.push(b'-'),
    }
    out.push(b'\n');
}

// Inlined, so that each field's name is a constant the compiler copies
// with a store or two rather than a call to `memcpy`.
#[inline(always)]
fn field_str(name: &[u8], value: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\":");
    string(value, out);
}

#[inline(always)]
fn field_opt(name: &[u8], value: Option<&str>, out: &mut Vec<u8>) {
    match value {
        Some(value) => field_str(name, value, out),
        None => {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(name);
            out.extend_from_slice(b"\":null");
        }
    }
}

/// A JSON string: quotes, backslashes and control characters escaped;
/// the rest (UTF-8 included) as it is. Most values need no escape: they
/// are checked eight bytes at a time and copied whole.
fn string(value: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = value.as_bytes();
    if needs_no_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        escape(bytes, out);
    }
    out.push(b'"');
}

/// Whether no byte of `bytes` is a quote, a backslash or below 0x20
/// (a word's bytes tested together: a byte below 0x20, or one equal to
/// a quote or backslash once xor-ed to zero, leaves a high bit set).
fn needs_no_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGHS;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let found = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if found != 0 {
            return false;
        }
    }
    chunks
        .remainder()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

fn escape(bytes: &[u8], out: &mut Vec<u8>) {
    let mut plain = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain..i]);
        plain = i + 1;
        if escaped.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&hex_pair(byte));
        } else {
            out.extend_from_slice(escaped);
        }
    }
    out.extend_from_slice(&bytes[plain..]);
}

/// A text-format value: spaces, quotes, backslashes and control
/// characters as `\xHH`.
fn bare(value: &str, out: &mut Vec<u8>) {
    for &byte in value.as_bytes() {
        if byte <= b' ' || byte == b'"' || byte == b'\\' || byte == 0x7f {
            out.extend_from_slice(b"\\x");
            out.extend_from_slice(&hex_pair(byte));
        } else {
            out.push(byte);
        }
    }
}

fn bare_or_dash(value: Option<&str>, out: &mut Vec<u8>) {
    match value {
        Some(value) if !value.is_empty() => bare(value, out),
        _ => out.push(b'-'),
    }
}

fn hex_pair(byte: u8) -> [u8; 2] {
    let mut pair = [0u8; 2];
    wasmgate_base::hex::write(&[byte], &mut pair);
    pair
}

/// `bytes` as lowercase hex (a trace id: 16 bytes), written into a stack
/// buffer and copied in one fixed-size piece.
fn hex(bytes: &[u8; 16], out: &mut Vec<u8>) {
    let mut text = [0u8; 32];
    wasmgate_base::hex::write(bytes, &mut text);
    out.extend_from_slice(&text);
}

/// `value`'s decimal digits. The digits go into a stack buffer that is
/// copied whole and cut back to their number: a fixed-size copy the
/// compiler writes as two stores rather than a `memcpy` call of the
/// digits' own length. (Measured against `itoa`, the line cost the same
/// within 0.1 %; kept because it needs no dependency.)
fn integer(value: u64, out: &mut Vec<u8>) {
    let digits = value.checked_ilog10().unwrap_or(0) as usize + 1;
    let mut text = [b'0'; 20];
    let mut rest = value;
    for digit in text[..digits].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let start = out.len();
    out.extend_from_slice(&text);
    out.truncate(start + digits);
}

/// Milliseconds with exactly three decimals (microseconds): `1.500`.
fn millis(time: Duration, out: &mut Vec<u8>) {
    // Not `as_micros`: its u128 arithmetic costs more than the digits.
    let micros = time.as_secs() * 1_000_000 + u64::from(time.subsec_micros());
    integer(micros / 1000, out);
    let fraction = micros % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ]);
}

/// `a.b.c.d:port` by hand; IPv6 addresses (rarer) by `Display`.
fn address(address: SocketAddr, out: &mut Vec<u8>) {
    match address {
        SocketAddr::V4(v4) => {
            for (i, octet) in v4.ip().octets().iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                integer(u64::from(*octet), out);
            }
            out.push(b':');
            integer(u64::from(v4.port()), out);
        }
        SocketAddr::V6(_) => {
            use std::io::Write;
            let _ = write!(out, "{address}");
        }
    }
}

/// RFC 3339 in UTC with exactly three fraction digits (fixed width: lines
/// line up, and readers can cut the time of day out by position). The
/// date and time of day are worked out once per second (a batch's lines
/// mostly share their second); only the milliseconds change in between.
pub(crate) fn rfc3339(time: SystemTime, out: &mut Vec<u8>) {
    thread_local! {
        static SECOND: RefCell<(u64, [u8; 19])> = const { RefCell::new((u64::MAX, [0; 19])) };
    }
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != since.as_secs() {
            let t = time::OffsetDateTime::from(time);
            let mut text = Vec::with_capacity(19);
            let _ = std::io::Write::write_fmt(
                &mut text,
                format_args!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second()
                ),
            );
            if let Ok(text) = <[u8; 19]>::try_from(text.as_slice()) {
                *second = (since.as_secs(), text);
            }
        }
        out.extend_from_slice(&second.1);
        let millis = since.subsec_millis();
        out.extend_from_slice(&[
            b'.',
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
            b'Z',
        ]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_json_wants() {
        let mut out = Vec::new();
        string("a\"b\\c\nd\u{1}é", &mut out);
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\u0001é\"".as_bytes());
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, "a\"b\\c\nd\u{1}é");
        // Every byte that needs an escape is found wherever it sits in a
        // word, and none that does not.
        for special in [b'"', b'\\', 0u8, 0x1f] {
            for at in 0..17 {
                let mut text = vec![b'a'; 17];
                text[at] = special;
                assert!(!needs_no_escape(&text), "{special} at {at}");
            }
        }
        let fine: Vec<u8> = (0x20..=0xffu8)
            .filter(|b| *b != b'"' && *b != b'\\')
            .collect();
        assert!(needs_no_escape(&fine));
    }

    #[test]
    fn text_values_never_run_into_the_next_field() {
        let mut out = Vec::new();
        bare("a b\"c", &mut out);
        assert_eq!(out, b"a\\x20b\\x22c");
    }

    #[test]
    fn integers_of_every_width() {
        for value in [0, 7, 9, 10, 99, 100, 65_535, 1_000_000_007, u64::MAX] {
            let mut out = b"x".to_vec();
            integer(value, &mut out);
            assert_eq!(out, format!("x{value}").as_bytes());
        }
    }

    #[test]
    fn millis_have_three_decimals() {
        let mut out = Vec::new();
        millis(Duration::from_micros(1_500), &mut out);
        out.push(b' ');
        millis(Duration::from_micros(12), &mut out);
        assert_eq!(out, b"1.500 0.012");
    }

    #[test]
    fn addresses_of_both_families() {
        let mut out = Vec::new();
        address("10.0.0.255:65535".parse().unwrap(), &mut out);
        out.push(b' ');
        address("[::1]:80".parse().unwrap(), &mut out);
        assert_eq!(out, b"10.0.0.255:65535 [::1]:80");
    }
}
