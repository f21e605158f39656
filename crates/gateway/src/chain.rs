//! A route's filter chain for one request: one Proxy-Wasm stream per filter,
//! in chain order, run phase by phase. A filter that fails (crash, timeout,
//! no instance) either fails the request (`fail: closed`) or drops out of
//! the chain for the rest of the request (`fail: open`). Bodies stream
//! through it with `body_pump.rs`.

use std::sync::Arc;

use wasmgate_config::FailStrategy;
use wasmgate_proxy_wasm::{FilterError, FilterPlugin, FilterStream, Flow, HttpExchange};

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
