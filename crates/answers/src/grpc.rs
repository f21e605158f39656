//! gRPC requests: the answers the gateway makes itself reach a gRPC client
//! as gRPC statuses, and `grpc-timeout` deadlines are kept.
//!
//! A gRPC client reads only `grpc-status` and `grpc-message` (in trailers,
//! or in the headers of a "trailers-only" answer); an HTML or JSON error
//! body with a 404 or 502 is, to it, a broken stream. So when a gRPC
//! request (`content-type: application/grpc...`) gets an answer the gateway
//! made (no route, an upstream down or too slow, a filter's refusal), the
//! answer becomes HTTP 200 with the matching `grpc-status` and the error's
//! message as `grpc-message`, and no body. Answers from the upstream pass
//! as they are: gRPC servers speak gRPC.
//!
//! | the gateway's answer | grpc-status |
//! |---|---|
//! | no route (404 `no_route`) | 5 NOT_FOUND |
//! | upstream unreachable or TLS failed (502), route overloaded (503) | 14 UNAVAILABLE |
//! | upstream or filter timeout (504), the deadline of `grpc-timeout` | 4 DEADLINE_EXCEEDED |
//! | body too large (413) | 8 RESOURCE_EXHAUSTED |
//! | a filter's local response | the gRPC status the filter gave, else by its HTTP status as Envoy maps them: 400 → 13, 401 → 16, 403 → 7, 404 → 12, 429/502/503/504 → 14, others → 2 |

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use wasmgate_transport::body::{self, Body, BoxError};

/// What the gateway's own answers carry (a response extension), so that a
/// gRPC request's can be turned into a gRPC status.
#[derive(Clone, Debug)]
pub struct GatewayAnswer {
    /// The error's kind (`no_route`, `upstream_timeout`, ...), or `local`
    /// for a filter's local response.
    pub kind: String,
    pub message: String,
    /// The status a filter asked for (`proxy_send_local_response`).
    pub grpc_status: Option<u32>,
    /// The whole error (`{"kind", "message", ...}`), for the log and the
    /// admin API when clients get only its kind and request id
    /// (`error_response::public`); `None` for a filter's local response.
    pub detail: Option<serde_json::Value>,
}

const DEADLINE_EXCEEDED: u32 = 4;
const GRPC_STATUS: &str = "grpc-status";
const GRPC_MESSAGE: &str = "grpc-message";

/// Whether a request is a gRPC call: its content type is `application/grpc`
/// or `application/grpc+proto` and the like.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A gRPC request's `grpc-timeout` (`<digits><H|M|S|m|u|n>`), if it has one.
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The gateway's answer when a gRPC call's deadline passed before the
/// upstream answered.
pub fn deadline_exceeded(after: Duration) -> Response<Body> {
    status_only(
        DEADLINE_EXCEEDED,
        &format!("deadline exceeded: no answer within the call's grpc-timeout ({after:?})"),
    )
}

/// `response` as a gRPC client can read it: a gateway-made answer becomes a
/// gRPC status; an upstream's passes as it is.
pub fn answer(response: Response<Body>) -> Response<Body> {
    let Some(made) = response.extensions().get::<GatewayAnswer>() else {
        return response;
    };
    if response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
    {
        return response; // a filter answered in gRPC itself
    }
    let code = made
        .grpc_status
        .unwrap_or_else(|| status_for(&made.kind, response.status()));
    status_only(code, &made.message)
}

/// A trailers-only answer: HTTP 200, `grpc-status` and `grpc-message` in
/// the headers, no body.
fn status_only(code: u32, message: &str) -> Response<Body> {
    let mut response = Response::new(body::empty());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}

fn status_for(kind: &str, status: StatusCode) -> u32 {
    match kind {
        "no_route" => 5,
        "upstream_timeout" | "filter_timeout" => DEADLINE_EXCEEDED,
        "upstream_unreachable" | "upstream_tls" | "route_overloaded" => 14,
        "body_too_large" => 8,
        // A filter's local response and the rest: Envoy's mapping of HTTP
        // statuses to gRPC ones.
        _ => match status.as_u16() {
            400 => 13,
            401 => 16,
            403 => 7,
            404 => 12,
            429 | 502 | 503 | 504 => 14,
            _ => 2,
        },
    }
}

/// `grpc-message` is percent-encoded: bytes outside printable ASCII and `%`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A gRPC response body that ends with `grpc-status: 4` trailers when the
/// call's deadline passes before the upstream has finished it (a stream
/// that would otherwise run on after the client gave up).
pub struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: bool,
}

impl DeadlineBody {
    pub fn wrap(inner: Body, deadline: tokio::time::Instant) -> Body {
        let body = DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            expired: false,
        };
        body::boxed(body)
    }
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired = true;
            let mut trailers = HeaderMap::new();
            trailers.insert(GRPC_STATUS, HeaderValue::from(DEADLINE_EXCEEDED));
            trailers.insert(GRPC_MESSAGE, HeaderValue::from_static("deadline exceeded"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_in_every_unit_and_nonsense_is_none() {
        let at = |v: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("grpc-timeout", HeaderValue::from_static(v));
            timeout(&headers)
        };
        assert_eq!(at("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(at("2M"), Some(Duration::from_secs(120)));
        assert_eq!(at("3S"), Some(Duration::from_secs(3)));
        assert_eq!(at("250m"), Some(Duration::from_millis(250)));
        assert_eq!(at("7u"), Some(Duration::from_micros(7)));
        assert_eq!(at("9n"), Some(Duration::from_nanos(9)));
        for bad in ["", "S", "10", "10x", "123456789S", "-1S", "1.5S"] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gateway_answers_map_to_grpc_statuses() {
        assert_eq!(status_for("no_route", StatusCode::NOT_FOUND), 5);
        assert_eq!(
            status_for("upstream_unreachable", StatusCode::BAD_GATEWAY),
            14
        );
        assert_eq!(
            status_for("upstream_timeout", StatusCode::GATEWAY_TIMEOUT),
            4
        );
        assert_eq!(status_for("local", StatusCode::FORBIDDEN), 7);
        assert_eq!(status_for("local", StatusCode::UNAUTHORIZED), 16);
        assert_eq!(status_for("local", StatusCode::IM_A_TEAPOT), 2);
        assert_eq!(percent_encode("ok 100% é"), "ok 100%25 %C3%A9");
    }
}
