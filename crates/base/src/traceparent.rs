//! The W3C Trace Context `traceparent` header (level 1), read and written
//! on plain bytes: the gateway decides a request's trace from it before
//! anything else, and filters' callouts carry one.

use crate::hex;

/// The length of a version-00 `traceparent`.
pub const LEN: usize = 55;

/// A W3C `traceparent` (Trace Context, level 1): version, trace id,
/// parent span id, flags, in lower-case hex between dashes.
#[derive(Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The parent span's id.
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceParent {
    /// The header's fields, or `None` when it is not one the spec lets a
    /// receiver continue: a bad shape, upper-case or non-hex digits,
    /// version `ff`, all-zero ids, or a version-00 header with more after
    /// it. A later version may append fields after a dash.
    pub fn parse(header: &[u8]) -> Option<TraceParent> {
        if header.len() < LEN {
            return None;
        }
        let version = hex::byte([header[0], header[1]])?;
        let dashes = [2, 35, 52].iter().all(|&at| header[at] == b'-');
        let rest_ok = match version {
            0xff => false,
            0 => header.len() == LEN,
            _ => header.len() == LEN || header[LEN] == b'-',
        };
        if !dashes || !rest_ok {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        hex::decode_into(&header[3..35], &mut trace_id)?;
        hex::decode_into(&header[36..52], &mut span_id)?;
        let flags = hex::byte([header[53], header[54]])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }
}

/// A version-00 header: `trace_id`, its parent `span_id`, the sampled flag.
pub fn format(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> [u8; LEN] {
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex::write(trace_id, &mut out[3..35]);
    hex::write(span_id, &mut out[36..52]);
    if sampled {
        out[54] = b'1';
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_gives_its_ids_and_flag() {
        let parent = TraceParent::parse(VALID).unwrap();
        assert_eq!(
            hex::encode(&parent.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(hex::encode(&parent.span_id), "00f067aa0ba902b7");
        assert!(parent.sampled);
        let unsampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!TraceParent::parse(unsampled).unwrap().sampled);
        // A later version may add fields after a dash.
        let later = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-beyond";
        assert!(TraceParent::parse(later).is_some());
    }

    #[test]
    fn what_the_spec_refuses_is_refused() {
        let refused: [&[u8]; 9] = [
            b"",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ];
        for header in refused {
            assert_eq!(TraceParent::parse(header), None, "{header:?}");
        }
    }

    #[test]
    fn formatting_gives_back_what_parsing_read() {
        let parent = TraceParent::parse(VALID).unwrap();
        let written = format(&parent.trace_id, &parent.span_id, true);
        assert_eq!(&written[..], VALID);
        let unsampled = format(&parent.trace_id, &parent.span_id, false);
        assert!(unsampled.ends_with(b"-00"));
    }
}
