//! The embedder side: an upstream that answers the fuzzer's http calls and
//! gRPC streams.

use wasmgate_proxy_wasm::{
    HttpCallFuture, HttpCallRequest, HttpCallResponse, HttpCaller, HttpStreamFuture,
    HttpStreamRequest, HttpStreamResponse, StreamBody, StreamPart,
};

use super::drive::pairs;

#[derive(Debug)]
pub(super) struct FuzzCaller;

impl HttpCaller for FuzzCaller {
    fn has_upstream(&self, upstream: &str) -> bool {
        upstream == "fuzz-upstream"
    }

    fn call(&self, request: HttpCallRequest) -> HttpCallFuture {
        Box::pin(async move {
            // Some calls fail, as a dead upstream would.
            if request.body.len() % 7 == 3 {
                return Err("refused by the fuzz upstream".into());
            }
            let path = request.headers.get(b":path").unwrap_or_default();
            Ok(HttpCallResponse {
                headers: pairs(&[(b":status", b"200"), (b"x-call-path", path)]),
                body: request.body,
                trailers: pairs(&[(b"x-call-trailer", b"t")]),
            })
        })
    }

    /// A gRPC stream's server: every piece the filter sends comes back, then
    /// status 0 once the filter ends its side.
    fn open_stream(&self, request: HttpStreamRequest) -> HttpStreamFuture {
        Box::pin(async move {
            Ok(HttpStreamResponse {
                headers: pairs(&[(b":status", b"200"), (b"content-type", b"application/grpc")]),
                body: Box::pin(EchoStream {
                    sent: request.body,
                    ended: false,
                }),
            })
        })
    }
}

struct EchoStream {
    sent: StreamBody,
    pub(super) ended: bool,
}

impl futures_core::Stream for EchoStream {
    type Item = Result<StreamPart, String>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        match self.sent.poll_recv(cx) {
            Poll::Ready(Some(data)) => Poll::Ready(Some(Ok(StreamPart::Data(data)))),
            Poll::Ready(None) => {
                self.ended = true;
                let trailers = pairs(&[(b"grpc-status", b"0")]);
                Poll::Ready(Some(Ok(StreamPart::Trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
