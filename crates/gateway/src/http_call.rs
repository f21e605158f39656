//! `proxy_http_call` (and Higress's `http_call` helpers) through the
//! gateway's upstreams: a Proxy-Wasm filter names an upstream (Envoy's
//! cluster) and gets the whole answer back, up to the call's
//! `max_reply_bytes` (`limits.proxy_wasm.call_reply_bytes`): a longer body
//! is not read further and the call fails. gRPC streams from filters are
//! streamed exchanges through the same upstreams: the request's body fed
//! as the filter sends, the answer's read as it comes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, SizeHint};
use wasmgate_proxy_wasm::{
    CallFailure, Headers, HttpCallFuture, HttpCallRequest, HttpCallResponse, HttpCaller,
    HttpStreamFuture, HttpStreamRequest, HttpStreamResponse, StreamBody, StreamPart,
};

use wasmgate_transport::body::BoxError;
use wasmgate_transport::node_pool::PooledBody;

use wasmgate_upstream::{OutboundBody, RequestHead, Upstream};

/// `proxy_http_call` through the gateway's upstreams.
///
/// A filter started by one build may serve in later ones (a reload that
/// leaves it unchanged keeps it, `build/routes.rs`), while each build has
/// upstreams of its own: the upstreams a caller uses are swapped to the
/// serving gateway's when that gateway is installed, so a kept filter calls
/// what the configuration now says, as Envoy's filters call its current
/// clusters.
#[derive(Debug)]
pub(crate) struct UpstreamCaller {
    upstreams: ArcSwap<HashMap<String, Arc<Upstream>>>,
}

impl UpstreamCaller {
    pub(crate) fn new(upstreams: Arc<HashMap<String, Arc<Upstream>>>) -> UpstreamCaller {
        UpstreamCaller {
            upstreams: ArcSwap::new(upstreams),
        }
    }

    /// From now on, calls go to `upstreams` (the gateway being installed).
    pub(crate) fn call_through(&self, upstreams: &Arc<HashMap<String, Arc<Upstream>>>) {
        self.upstreams.store(upstreams.clone());
    }
}

impl HttpCaller for UpstreamCaller {
    fn has_upstream(&self, upstream: &str) -> bool {
        self.upstreams.load().contains_key(upstream)
    }

    fn call(&self, request: HttpCallRequest) -> HttpCallFuture {
        let upstream = self.upstreams.load().get(&request.upstream).cloned();
        Box::pin(async move {
            let upstream = upstream.ok_or("unknown upstream")?;
            let head = request_head(&request.headers)?;
            let body = OutboundBody::Replayable(Bytes::from(request.body));
            let response = upstream
                .send(head, body, None)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let mut headers = Headers::from_map(parts.headers);
            headers.push_pseudo(":status", parts.status.as_str().as_bytes().to_vec());
            let (body, trailers) = read_reply(body, request.max_reply_bytes).await?;
            Ok(HttpCallResponse {
                headers,
                body,
                trailers,
            })
        })
    }

    fn open_stream(&self, request: HttpStreamRequest) -> HttpStreamFuture {
        let upstream = self.upstreams.load().get(&request.upstream).cloned();
        Box::pin(async move {
            let upstream = upstream.ok_or("unknown upstream")?;
            let head = request_head(&request.headers)?;
            let body = wasmgate_transport::body::boxed(SentBody(request.body));
            let response = upstream
                .send(head, OutboundBody::Streaming(body), None)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let mut headers = Headers::from_map(parts.headers);
            headers.push_pseudo(":status", parts.status.as_str().as_bytes().to_vec());
            Ok(HttpStreamResponse {
                headers,
                body: Box::pin(ReceivedParts(body)),
            })
        })
    }
}

/// The head of a call from its pseudo-headers (`:method`, `:path`,
/// `:authority`, as the SDKs send them) and the rest.
fn request_head(headers: &Headers) -> Result<RequestHead, String> {
    let get = |name: &str| {
        headers
            .get(name.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let method = get(":method").unwrap_or_else(|| "GET".into());
    let mut map = headers.map().clone();
    if let Some(authority) = get(":authority") {
        if let Ok(value) = authority.parse() {
            map.insert(hyper::header::HOST, value);
        }
    }
    Ok(RequestHead {
        method: method
            .parse()
            .map_err(|_| format!("bad method `{method}`"))?,
        path: get(":path").unwrap_or_else(|| "/".into()),
        headers: map,
    })
}

/// A reply's body and trailers, read up to `limit` bytes of body: one that
/// says it is longer (Content-Length) is not read at all, one that turns
/// out longer is read no further.
async fn read_reply<B>(body: B, limit: usize) -> Result<(Vec<u8>, Headers), CallFailure>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(CallFailure::ReplyTooLarge { limit });
    }
    let collected = http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map_err(
            |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => CallFailure::ReplyTooLarge { limit },
                None => CallFailure::Failed(format!("reading the answer: {e}")),
            },
        )?;
    let trailers = collected
        .trailers()
        .map(|t| Headers::from_map(t.clone()))
        .unwrap_or_default();
    Ok((collected.to_bytes().to_vec(), trailers))
}

/// A streamed request's body: what the filter sends, until it ends its side.
struct SentBody(StreamBody);

impl hyper::body::Body for SentBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|data| data.map(|d| Ok(Frame::data(d))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A streamed answer's body as the parts a filter hears.
struct ReceivedParts(PooledBody);

impl futures_core::Stream for ReceivedParts {
    type Item = Result<StreamPart, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let frame = match std::task::ready!(Pin::new(&mut self.0).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(format!("reading the answer: {e}")))),
            Some(Ok(frame)) => frame,
        };
        let part = match frame.into_data() {
            Ok(data) => StreamPart::Data(data),
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => StreamPart::Trailers(Headers::from_map(trailers)),
                // A frame kind hyper may add later: nothing to report.
                Err(_) => StreamPart::Data(Bytes::new()),
            },
        };
        Poll::Ready(Some(Ok(part)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A body that never ends, counting the frames it gave.
    struct Endless<'a>(&'a AtomicUsize);

    impl hyper::body::Body for Endless<'_> {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&[7; 1024])))))
        }
    }

    #[tokio::test]
    async fn a_reply_is_read_up_to_its_limit_and_no_further() {
        let frames = AtomicUsize::new(0);
        let refused = read_reply(Endless(&frames), 4096).await;
        assert_eq!(refused, Err(CallFailure::ReplyTooLarge { limit: 4096 }));
        assert_eq!(
            frames.load(Ordering::Relaxed),
            5,
            "4 KiB and one frame more"
        );

        let announced = http_body_util::Full::new(Bytes::from_static(&[1; 100]));
        let refused = read_reply(announced, 99).await;
        assert_eq!(refused, Err(CallFailure::ReplyTooLarge { limit: 99 }));

        let body = http_body_util::Full::new(Bytes::from_static(b"fits"));
        let (read, trailers) = read_reply(body, 4).await.unwrap();
        assert_eq!((read.as_slice(), trailers.len()), (&b"fits"[..], 0));
    }
}
