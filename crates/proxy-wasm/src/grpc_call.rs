//! `proxy_grpc_call`: a filter calls a unary gRPC method of an upstream and
//! gets the reply later, as Envoy's filters do. The call is an HTTP/2
//! request through the same [`HttpCaller`](crate::HttpCaller) as
//! `proxy_http_call` (so the upstream needs `protocol: h2c` or `h2`); this
//! module turns the guest's call into that request and the answer back into
//! what the callbacks report:
//!
//! - the reply's message (status 0): `proxy_on_grpc_receive(context, token,
//!   size)`, the message readable as buffer 5 (GrpcReceiveBuffer);
//! - any other status: `proxy_on_grpc_close(context, token, code)`, with the
//!   status message from `proxy_get_status`.
//!
//! Statuses follow gRPC's: the server's `grpc-status` (in the trailers, or in
//! the headers of a trailers-only answer), an HTTP error mapped as gRPC's
//! HTTP-to-gRPC table says, UNAVAILABLE when no answer came,
//! DEADLINE_EXCEEDED when the call's timeout passed first, and
//! RESOURCE_EXHAUSTED when the reply was larger than the call may read
//! (`call_reply_bytes`), as a gRPC client reports a message over its limit.

use std::time::Duration;

use crate::headers::Headers;
use crate::http_call::{CallFailure, HttpCallRequest, HttpCallResponse};

/// gRPC status codes the host itself reports.
pub(crate) const DEADLINE_EXCEEDED: u32 = 4;
pub(crate) const UNKNOWN: u32 = 2;
pub(crate) const RESOURCE_EXHAUSTED: u32 = 8;
pub(crate) const INTERNAL: u32 = 13;
pub(crate) const UNAVAILABLE: u32 = 14;

/// Where a gRPC call or stream goes, and its initial metadata.
#[derive(Debug)]
pub(crate) struct GrpcTarget {
    pub upstream: String,
    pub service: String,
    pub method: String,
    /// Initial metadata: the request's extra headers.
    pub metadata: Headers,
}

/// A call `proxy_grpc_call` recorded.
#[derive(Debug)]
pub(crate) struct GrpcCallRequest {
    pub target: GrpcTarget,
    /// The serialized request message (the guest's protobuf bytes).
    pub message: Vec<u8>,
    pub timeout: Duration,
}

/// How a call ended: the reply's message, or a status with its message.
#[derive(Debug)]
pub(crate) enum GrpcOutcome {
    Reply(Vec<u8>),
    Status(u32, String),
    /// The reply was over `call_reply_bytes` (this many): RESOURCE_EXHAUSTED,
    /// and a refusal counted for the plugin.
    ReplyTooLarge(usize),
}

impl GrpcCallRequest {
    /// The HTTP/2 request gRPC makes of a unary call: `POST
    /// /service/method`, the message in one uncompressed frame, the deadline
    /// as `grpc-timeout`; a reply body over `max_reply_bytes` is not read.
    pub fn into_http(self, max_reply_bytes: usize) -> HttpCallRequest {
        let upstream = self.target.upstream.clone();
        HttpCallRequest {
            headers: request_headers(self.target, Some(self.timeout)),
            body: framed(&self.message),
            upstream,
            trailers: Headers::default(),
            timeout: self.timeout,
            max_reply_bytes,
        }
    }
}

/// A message as gRPC sends it: uncompressed, behind its length.
pub(crate) fn framed(message: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(5 + message.len());
    body.push(0); // not compressed
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// The HTTP/2 head of a gRPC call or stream: the initial metadata, then
/// what gRPC's protocol requires (over any the guest set itself).
pub(crate) fn request_headers(target: GrpcTarget, deadline: Option<Duration>) -> Headers {
    let GrpcTarget {
        upstream,
        service,
        method,
        metadata,
    } = target;
    let mut headers = metadata;
    let mut set = |name: &str, value: String| {
        headers.remove(name.as_bytes());
        headers.add(name.as_bytes(), value.into_bytes());
    };
    set(":method", "POST".into());
    set(":path", format!("/{service}/{method}"));
    set(":authority", upstream);
    set("content-type", "application/grpc".into());
    set("te", "trailers".into());
    if let Some(deadline) = deadline {
        set("grpc-timeout", format!("{}m", deadline.as_millis().max(1)));
    }
    headers
}

/// What an HTTP answer (or its absence) means for the call.
pub(crate) fn outcome(answer: Result<HttpCallResponse, CallFailure>) -> GrpcOutcome {
    let response = match answer {
        Ok(response) => response,
        Err(CallFailure::Failed(reason)) => return GrpcOutcome::Status(UNAVAILABLE, reason),
        Err(CallFailure::ReplyTooLarge { limit }) => return GrpcOutcome::ReplyTooLarge(limit),
    };
    // A trailers-only answer carries the status in its headers.
    let status = status_in(&response.trailers).or_else(|| status_in(&response.headers));
    match status.unwrap_or_else(|| without_status(&response.headers)) {
        (0, _) => match first_message(&response.body) {
            Ok(message) => GrpcOutcome::Reply(message),
            Err(reason) => GrpcOutcome::Status(INTERNAL, reason),
        },
        (code, message) => GrpcOutcome::Status(code, message),
    }
}

/// The gRPC status (`grpc-status`, `grpc-message`) in `headers`, if there is one.
pub(crate) fn status_in(headers: &Headers) -> Option<(u32, String)> {
    let status = String::from_utf8_lossy(headers.get(b"grpc-status")?).into_owned();
    let message = headers
        .get(b"grpc-message")
        .map(|m| percent_decode(&String::from_utf8_lossy(m)))
        .unwrap_or_default();
    Some(match status.trim().parse::<u32>() {
        Ok(code) => (code, message),
        Err(_) => (UNKNOWN, format!("grpc-status `{status}` is not a number")),
    })
}

/// The status of an answer that carries none: its HTTP status mapped as
/// gRPC's HTTP-to-gRPC table says.
pub(crate) fn without_status(headers: &Headers) -> (u32, String) {
    let http_status: u16 = headers
        .get(b":status")
        .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
        .unwrap_or(0);
    let code = match http_status {
        200 => INTERNAL, // a 200 without grpc-status breaks the protocol
        400 => INTERNAL,
        401 => 16, // UNAUTHENTICATED
        403 => 7,  // PERMISSION_DENIED
        404 => 12, // UNIMPLEMENTED
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    };
    (
        code,
        format!("the upstream answered HTTP {http_status} without a gRPC status"),
    )
}

/// The first length-prefixed message of a gRPC body (a unary reply has one).
fn first_message(body: &[u8]) -> Result<Vec<u8>, String> {
    let Some((&[compressed, a, b, c, d], rest)) = body.split_first_chunk::<5>() else {
        return Err("the reply has no complete gRPC message".into());
    };
    if compressed != 0 {
        return Err("the reply is compressed, which gRPC calls from filters do not ask for".into());
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    rest.get(..len)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| "the reply's gRPC message is cut short".into())
}

/// `grpc-message` is percent-encoded (gRPC's HTTP/2 protocol document).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: &str, grpc: Option<(&str, &str)>, body: &[u8]) -> HttpCallResponse {
        let mut headers = Headers::default();
        headers.push_pseudo(":status", status.as_bytes().to_vec());
        let mut trailers = Headers::default();
        if let Some((code, message)) = grpc {
            trailers.add(b"grpc-status", code.as_bytes().to_vec());
            trailers.add(b"grpc-message", message.as_bytes().to_vec());
        }
        HttpCallResponse {
            headers,
            body: body.to_vec(),
            trailers,
        }
    }

    #[test]
    fn replies_statuses_and_broken_answers() {
        let framed = [&[0, 0, 0, 0, 2][..], b"hi"].concat();
        assert!(matches!(
            outcome(Ok(answer("200", Some(("0", "")), &framed))),
            GrpcOutcome::Reply(m) if m == b"hi"
        ));
        assert!(matches!(
            outcome(Ok(answer("200", Some(("3", "told%20to fail")), b""))),
            GrpcOutcome::Status(3, m) if m == "told to fail"
        ));
        assert!(matches!(
            outcome(Ok(answer("404", None, b""))),
            GrpcOutcome::Status(12, _)
        ));
        assert!(matches!(
            outcome(Ok(answer("200", Some(("0", "")), &[0, 0, 0, 0, 9, 1]))),
            GrpcOutcome::Status(13, _)
        ));
        assert!(matches!(
            outcome(Err("refused".into())),
            GrpcOutcome::Status(14, m) if m == "refused"
        ));
        assert!(matches!(
            outcome(Err(CallFailure::ReplyTooLarge { limit: 10 })),
            GrpcOutcome::ReplyTooLarge(10)
        ));
    }

    #[test]
    fn the_request_is_a_grpc_post() {
        let request = GrpcCallRequest {
            target: GrpcTarget {
                upstream: "svc".into(),
                service: "test.Echo".into(),
                method: "Unary".into(),
                metadata: Headers::from_pairs(vec![(b"x-meta".to_vec(), b"1".to_vec())]),
            },
            message: b"abc".to_vec(),
            timeout: Duration::from_millis(1500),
        }
        .into_http(1 << 20);
        assert_eq!(
            request.headers.get(b":path"),
            Some(&b"/test.Echo/Unary"[..])
        );
        assert_eq!(request.headers.get(b"grpc-timeout"), Some(&b"1500m"[..]));
        assert_eq!(request.headers.get(b"x-meta"), Some(&b"1"[..]));
        assert_eq!(request.body, [&[0, 0, 0, 0, 3][..], b"abc"].concat());
        assert_eq!(request.max_reply_bytes, 1 << 20);
    }
}
