//! A route's filter chain for one request: one Proxy-Wasm stream per filter,
//! in chain order, run phase by phase. A filter that fails (crash, timeout,
//! no instance) either fails the request (`fail: closed`) or drops out of
//! the chain for the rest of the request (`fail: open`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::mpsc;
use wasmgate_proxy_wasm::Headers;
use wasmgate_proxy_wasm::{FilterError, FilterPlugin, FilterStream, Flow, HttpExchange};

use crate::body::{Body, BoxError, ClientBodyError};
use wasmgate_config::FailStrategy;

/// A filter of a route: the plugin configured for that route, and its policy.
pub struct RouteFilter {
    pub plugin: Arc<FilterPlugin>,
    pub fail: FailStrategy,
}

/// Why the chain stopped the request.
#[derive(Debug)]
pub enum Stop {
    /// A filter sent a local response (it is in the exchange).
    Respond,
    /// A filter closed the stream.
    Closed { plugin: String },
    /// A fail-closed filter failed.
    Failed { plugin: String, error: FilterError },
    /// A body the filters hold back (buffer) outgrew `limits.max_body_bytes`.
    TooLarge { limit: usize },
    /// The client's body stalled or was malformed (408 / 400).
    ClientBody {
        status: hyper::StatusCode,
        message: String,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Request,
    Response,
}

struct Link {
    stream: FilterStream,
    fail: FailStrategy,
    /// Body bytes the filter asked to hold (StopIterationAndBuffer).
    held: Vec<u8>,
}

pub struct Chain {
    links: Vec<Option<Link>>,
}

impl Chain {
    /// Starts a stream on every filter; `None` when nothing is in the chain.
    pub async fn start(filters: &[RouteFilter]) -> Result<Chain, Stop> {
        let mut links = Vec::with_capacity(filters.len());
        for filter in filters {
            match filter.plugin.stream().await {
                Ok(stream) => links.push(Some(Link {
                    stream,
                    fail: filter.fail,
                    held: Vec::new(),
                })),
                Err(error) => {
                    if let Err(stop) = fail(filter.plugin.name(), filter.fail, error) {
                        // The streams already started go back to their pools.
                        Chain { links }.finish(&mut Box::default()).await;
                        return Err(stop);
                    }
                }
            }
        }
        Ok(Chain { links })
    }

    pub async fn headers(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<(), Stop> {
        for slot in &mut self.links {
            let Some(link) = slot else { continue };
            let result = match direction {
                Direction::Request => {
                    link.stream
                        .on_request_headers(exchange, end_of_stream)
                        .await
                }
                Direction::Response => {
                    link.stream
                        .on_response_headers(exchange, end_of_stream)
                        .await
                }
            };
            // Headers cannot be buffered: Buffer only comes from body callbacks.
            settle(slot, result)?;
        }
        Ok(())
    }

    /// Runs one body chunk through the chain. Returns the bytes that come out
    /// of the last filter (empty while some filter holds them).
    pub async fn body_chunk(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        mut data: Vec<u8>,
        end_of_stream: bool,
    ) -> Result<Vec<u8>, Stop> {
        for slot in &mut self.links {
            let Some(link) = slot else { continue };
            let mut held = std::mem::take(&mut link.held);
            held.append(&mut data);
            *body_of(exchange, direction) = held;
            let result = match direction {
                Direction::Request => link.stream.on_request_body(exchange, end_of_stream).await,
                Direction::Response => link.stream.on_response_body(exchange, end_of_stream).await,
            };
            let out = std::mem::take(body_of(exchange, direction));
            match settle(slot, result)? {
                Some(Flow::Buffer) => {
                    if let Some(link) = slot {
                        link.held = out;
                    }
                    return Ok(Vec::new());
                }
                // Continue, or the filter dropped out (fail open): pass on.
                _ => data = out,
            }
        }
        Ok(data)
    }

    pub async fn trailers(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
    ) -> Result<(), Stop> {
        for slot in &mut self.links {
            let Some(link) = slot else { continue };
            let result = match direction {
                Direction::Request => link.stream.on_request_trailers(exchange).await,
                Direction::Response => link.stream.on_response_trailers(exchange).await,
            };
            settle(slot, result)?;
        }
        Ok(())
    }

    /// `proxy_on_log` / `on_done` / `on_delete` on every stream; instances go back.
    pub async fn finish(self, exchange: &mut Box<HttpExchange>) {
        for link in self.links.into_iter().flatten() {
            let plugin = link.stream.plugin().clone();
            if let Err(error) = link.stream.finish(exchange).await {
                let plugin = plugin.name();
                tracing::warn!(%plugin, %error, "filter failed while finishing the stream");
            }
        }
    }

    /// Streams `source` through the body callbacks into `sink`. Ends early
    /// (Err) when a filter stops the stream; the sink then gets an error so
    /// the peer sees an aborted body rather than a truncated one.
    /// `first` is a frame already read from `source`.
    pub async fn pump<B>(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        mut source: B,
        mut first: Option<Result<Frame<Bytes>, B::Error>>,
        sink: &mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
        limit: usize,
    ) -> Result<(), Stop>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        use http_body_util::BodyExt;
        // Bytes the filters hold back (fed in, nothing passed on yet): a
        // filter buffering the body is what the limit protects against; a
        // body streaming through is not held and may be any size.
        let mut held = 0usize;
        loop {
            let next = match first.take() {
                Some(frame) => Some(frame),
                None => source.frame().await,
            };
            let frame = match next {
                None => {
                    // The end came without a last data frame: tell the filters.
                    let out = self
                        .body_chunk(direction, exchange, Vec::new(), true)
                        .await?;
                    send(sink, out).await;
                    return Ok(());
                }
                Some(Err(e)) => {
                    let error: BoxError = e.into();
                    let client = ClientBodyError::find(&*error).map(|e| Stop::ClientBody {
                        status: e.status(),
                        message: e.to_string(),
                    });
                    let _ = sink.send(Err(error)).await;
                    // An upstream's broken body is passed on as broken; a
                    // client's ends the request with its own status.
                    return client.map_or(Ok(()), Err);
                }
                Some(Ok(frame)) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    held += data.len();
                    let end = source.is_end_stream();
                    let out = self
                        .body_chunk(direction, exchange, data.to_vec(), end)
                        .await?;
                    if !out.is_empty() {
                        held = 0;
                    } else if held > limit {
                        return Err(Stop::TooLarge { limit });
                    }
                    send(sink, out).await;
                    if end {
                        return Ok(());
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let out = self
                            .body_chunk(direction, exchange, Vec::new(), false)
                            .await?;
                        send(sink, out).await;
                        *trailers_of(exchange, direction) = Headers::from_map(trailers);
                        self.trailers(direction, exchange).await?;
                        // Filters read trailers in `proxy_on_log` too: a copy
                        // goes out.
                        let map = trailers_of(exchange, direction).map().clone();
                        let _ = sink.send(Ok(Frame::trailers(map))).await;
                        return Ok(());
                    }
                }
            }
        }
    }
}

async fn send(sink: &mpsc::Sender<Result<Frame<Bytes>, BoxError>>, data: Vec<u8>) {
    if !data.is_empty() {
        let _ = sink.send(Ok(Frame::data(Bytes::from(data)))).await;
    }
}

/// Applies the fail strategy to a filter's result.
fn settle(
    slot: &mut Option<Link>,
    result: Result<Flow, FilterError>,
) -> Result<Option<Flow>, Stop> {
    let link = slot.as_ref().expect("settled slots hold a link");
    // The plugin's name only when something went wrong: copying it for
    // every callback was an allocation per callback and filter.
    let plugin = || link.stream.plugin().name().to_string();
    match result {
        Ok(Flow::Continue) => Ok(Some(Flow::Continue)),
        Ok(Flow::Buffer) => Ok(Some(Flow::Buffer)),
        Ok(Flow::Respond) => Err(Stop::Respond),
        Ok(Flow::Close) => Err(Stop::Closed { plugin: plugin() }),
        Err(error) => {
            let (plugin, strategy) = (plugin(), link.fail);
            // The stream's instance is dropped with it (a crashed instance
            // never goes back to the pool).
            *slot = None;
            fail(&plugin, strategy, error)?;
            Ok(None)
        }
    }
}

fn fail(plugin: &str, strategy: FailStrategy, error: FilterError) -> Result<(), Stop> {
    match strategy {
        FailStrategy::Closed => Err(Stop::Failed {
            plugin: plugin.to_string(),
            error,
        }),
        FailStrategy::Open => {
            tracing::warn!(%plugin, %error, "filter failed; fail-open skips it for this request");
            Ok(())
        }
    }
}

fn body_of(exchange: &mut HttpExchange, direction: Direction) -> &mut Vec<u8> {
    match direction {
        Direction::Request => &mut exchange.request_body,
        Direction::Response => &mut exchange.response_body,
    }
}

fn trailers_of(exchange: &mut HttpExchange, direction: Direction) -> &mut Headers {
    match direction {
        Direction::Request => &mut exchange.request_trailers,
        Direction::Response => &mut exchange.response_trailers,
    }
}

/// A body fed by a channel (what `Chain::pump` writes into).
pub fn channel_body(rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>) -> Body {
    channel_body_after(None, rx)
}

/// The same, with a frame already taken from the channel in front.
pub fn channel_body_after(
    first: Option<Result<Frame<Bytes>, BoxError>>,
    rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
) -> Body {
    use http_body_util::BodyExt;
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
