//! Bodies streaming through a filter chain: frames come from a source body,
//! go through the chain's body callbacks, and what comes out goes into a
//! channel that the other side reads as its body (`channel_body`).
//!
//! One direction at a time (`Chain::pump`) is the common case: a request
//! body ends before its response begins. A response that begins while its
//! request is still streaming (gRPC bidirectional calls, a client that
//! sends as it reads) takes both directions in one task (`Chain::duplex`):
//! the chain is one set of Proxy-Wasm streams and runs one callback at a
//! time, so whichever side has a frame ready is fed next, and neither waits
//! for the other to end.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::mpsc;
use wasmgate_proxy_wasm::{Headers, HttpExchange};

use crate::chain::{Chain, Direction, Stop};
use wasmgate_transport::body::{Body, BoxError, ClientBodyError};

/// Where a pumped body's frames go.
pub type Sink = mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

/// One direction of a body on its way through the chain.
pub struct BodyPump<B> {
    direction: Direction,
    source: B,
    sink: Sink,
    /// Bytes the filters hold back (fed in, nothing passed on yet): a
    /// filter buffering the body is what the limit protects against; a
    /// body streaming through is not held and may be any size.
    held: usize,
    limit: usize,
}

impl<B> BodyPump<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    pub fn new(direction: Direction, source: B, sink: Sink, limit: usize) -> Self {
        BodyPump {
            direction,
            source,
            sink,
            held: 0,
            limit,
        }
    }

    /// The source's next frame. Cancel-safe (a frame not yet read stays in
    /// the source), so `select!` may drop it.
    pub async fn next(&mut self) -> Option<Result<Frame<Bytes>, B::Error>> {
        self.source.frame().await
    }

    /// [`BodyPump::next`], once the sink has room for what feeding that
    /// frame sends on (a frame and the body's end). Where a pump is one
    /// side of a `select!`, this keeps a full sink from stalling the other
    /// side: a peer that answers as it reads (an echo, a bidirectional
    /// stream) stops reading until its answer is read, and feeding into its
    /// full channel would wait for it forever while its answer went unread.
    /// Cancel-safe as `next` is (a cancelled wait only loses its turn).
    pub async fn next_when_room(&mut self) -> Option<Result<Frame<Bytes>, B::Error>> {
        // Only this pump sends into the sink: room seen now stays room.
        // A closed sink has no room to wait for; feeding finds it closed.
        let _ = self.sink.reserve_many(2).await;
        self.next().await
    }

    /// Ends the body as broken, so the peer reading it sees an aborted
    /// body, never a shorter one that looks whole.
    pub async fn abort(self, why: &'static str) {
        let _ = self.sink.send(Err(why.into())).await;
    }

    /// The same without waiting, for a body left behind because its answer
    /// is complete: a reader that stopped reading has a full channel, and
    /// then the body is simply dropped.
    pub fn abandon(self) {
        let _ = self
            .sink
            .try_send(Err("the answer ended before this body".into()));
    }
}

impl Chain {
    /// Feeds one frame of `pump`'s source (`None`: the source is over)
    /// through the chain into its sink. `Ok(true)` once that body is
    /// complete. Ends early (Err) when a filter stops the stream.
    pub async fn feed<B>(
        &mut self,
        pump: &mut BodyPump<B>,
        exchange: &mut Box<HttpExchange>,
        next: Option<Result<Frame<Bytes>, B::Error>>,
    ) -> Result<bool, Stop>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let direction = pump.direction;
        let frame = match next {
            None => {
                // The end came without a last data frame: tell the filters.
                let out = self
                    .body_chunk(direction, exchange, Vec::new(), true)
                    .await?;
                send(&pump.sink, out).await;
                return Ok(true);
            }
            Some(Err(e)) => {
                let error: BoxError = e.into();
                let client = ClientBodyError::find(&*error).map(|e| Stop::ClientBody {
                    status: e.status(),
                    message: e.to_string(),
                });
                let _ = pump.sink.send(Err(error)).await;
                // An upstream's broken body is passed on as broken; a
                // client's ends the request with its own status.
                return client.map_or(Ok(true), Err);
            }
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                pump.held += data.len();
                let end = pump.source.is_end_stream();
                let out = self
                    .body_chunk(direction, exchange, data.to_vec(), end)
                    .await?;
                if !out.is_empty() {
                    pump.held = 0;
                } else if pump.held > pump.limit {
                    return Err(Stop::TooLarge { limit: pump.limit });
                }
                send(&pump.sink, out).await;
                Ok(end)
            }
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => {
                    let out = self
                        .body_chunk(direction, exchange, Vec::new(), false)
                        .await?;
                    send(&pump.sink, out).await;
                    *trailers_of(exchange, direction) = Headers::from_map(trailers);
                    self.trailers(direction, exchange).await?;
                    // Filters read trailers in `proxy_on_log` too: a copy
                    // goes out.
                    let map = trailers_of(exchange, direction).map().clone();
                    let _ = pump.sink.send(Ok(Frame::trailers(map))).await;
                    Ok(true)
                }
                // A frame of a kind hyper may add later: not ours to pass.
                Err(_) => Ok(false),
            },
        }
    }

    /// Streams a whole body through the chain. `first` is a frame already
    /// read from the source. On a stop the sink gets an error.
    pub async fn pump<B>(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        mut pump: BodyPump<B>,
        first: Option<Result<Frame<Bytes>, B::Error>>,
    ) -> Result<(), Stop>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let mut next = match first {
            Some(frame) => Some(frame),
            None => pump.next().await,
        };
        loop {
            match self.feed(&mut pump, exchange, next).await {
                Ok(true) => return Ok(()),
                Ok(false) => next = pump.next().await,
                Err(stop) => {
                    pump.abort("stopped by a filter").await;
                    return Err(stop);
                }
            }
        }
    }

    /// Streams the rest of a request body and its response body at once.
    /// Over when the response is: a request body still coming then is
    /// abandoned (its answer is complete). On a stop both sinks get an
    /// error.
    pub async fn duplex<A, B>(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        request: BodyPump<A>,
        mut response: BodyPump<B>,
    ) -> Result<(), Stop>
    where
        A: hyper::body::Body<Data = Bytes> + Unpin,
        A::Error: Into<BoxError>,
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let mut request = Some(request);
        let stopped = loop {
            tokio::select! {
                next = async {
                    match request.as_mut() {
                        Some(pump) => pump.next_when_room().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let pump = request.as_mut().expect("only polled while there");
                    match self.feed(pump, exchange, next).await {
                        // Dropping the sink ends the body the upstream reads.
                        Ok(true) => request = None,
                        Ok(false) => {}
                        Err(stop) => break stop,
                    }
                }
                next = response.next() => match self.feed(&mut response, exchange, next).await {
                    Ok(true) => {
                        if let Some(pump) = request {
                            pump.abandon();
                        }
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(stop) => break stop,
                },
            }
        };
        if let Some(request) = request {
            request.abort("stopped by a filter").await;
        }
        response.abort("stopped by a filter").await;
        Err(stopped)
    }
}

async fn send(sink: &Sink, data: Vec<u8>) {
    if !data.is_empty() {
        let _ = sink.send(Ok(Frame::data(Bytes::from(data)))).await;
    }
}

fn trailers_of(exchange: &mut HttpExchange, direction: Direction) -> &mut Headers {
    match direction {
        Direction::Request => &mut exchange.request_trailers,
        Direction::Response => &mut exchange.response_trailers,
    }
}

/// A body fed by a channel (what a pump writes into).
pub fn channel_body(rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>) -> Body {
    channel_body_after(None, rx)
}

/// The same, with a frame already taken from the channel in front.
pub fn channel_body_after(
    first: Option<Result<Frame<Bytes>, BoxError>>,
    rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
) -> Body {
    http_body_util::StreamBody::new(ReceiverStream { first, rx }).boxed_unsync()
}

/// An mpsc receiver as a `futures::Stream`, without pulling in a stream crate.
struct ReceiverStream {
    first: Option<Result<Frame<Bytes>, BoxError>>,
    rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
}

impl futures_core::Stream for ReceiverStream {
    type Item = Result<Frame<Bytes>, BoxError>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return std::task::Poll::Ready(Some(first));
        }
        self.rx.poll_recv(cx)
    }
}
