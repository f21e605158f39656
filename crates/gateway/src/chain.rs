//! A route's filter chain for one request: one Proxy-Wasm stream per filter,
//! run phase by phase, as Envoy runs its HTTP filters: the request's
//! callbacks in chain order, the response's in reverse order (the last
//! filter sees the response first). A filter that fails (crash, timeout,
//! no instance) either fails the request (`fail: closed`) or drops out of
//! the chain for the rest of the request (`fail: open`). Bodies stream
//! through it with `body_pump.rs`.
//!
//! A filter that pauses in a headers callback with a body to come stops
//! the headers there (Envoy's StopIteration): the filters after it have
//! not seen them, the body goes to it (and to the filters before it), and
//! when one of its body callbacks continues, the headers go on to the next
//! filters, then that body. Until then nothing leaves the chain, so the
//! headers it edits in its body callbacks are the ones sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

// The filters' clock (read before and after each callback when a
// request's log line or trace wants their times): quanta reads the CPU's
// time-stamp counter where it is invariant, a few instructions rather than
// a clock_gettime and std's timespec arithmetic, which cost a logged
// request about 900 instructions (bench/instructions.sh).
use quanta::Instant;

use wasmgate_config::FailStrategy;
use wasmgate_proxy_wasm::{FilterError, FilterPlugin, FilterStream, Flow, HttpExchange, Whole};

use crate::endpoint::function::FunctionServed;
use wasmgate_upstream::UpstreamServed;

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

/// How far [`Chain::response_whole`] took a response.
pub enum WholeResponse {
    /// Its headers went through; the body (given back) goes on as usual.
    Headers(Vec<u8>),
    /// Headers and body went through (what came out); the streams' end
    /// is still to come (`Chain::finish`).
    Body(Vec<u8>),
    /// All of it, the stream's end included (what came out).
    Ended(Vec<u8>),
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
    /// One per filter of the route, in order; `None` once a filter dropped
    /// out (fail open).
    links: Vec<Option<Link>>,
    /// Per direction (request, response), the filter whose headers callback
    /// stopped the headers (`Flow::Stop`), while they are stopped there.
    stopped: [Option<usize>; 2],
    /// What the access log wants to know, when it is on (`access.rs`).
    notes: Option<Arc<ChainNotes>>,
}

/// What a request's chain did, for its access-log line: the time each
/// filter's callbacks took, and the filter that answered by itself. Shared
/// with the response body, whose end writes the line.
#[derive(Debug)]
pub struct ChainNotes {
    /// The route's filters' names (`Route::filter_names`).
    names: Arc<[Arc<str>]>,
    filters: Box<[FilterNote]>,
    since: Instant,
    local_response: OnceLock<String>,
    /// The node that answered (the response the chain filters is a new one).
    upstream: OnceLock<UpstreamServed>,
    /// Or the function that did.
    function: OnceLock<FunctionServed>,
}

/// One filter's times on one request.
#[derive(Debug, Default)]
struct FilterNote {
    /// Its callbacks' time.
    nanos: AtomicU64,
    /// When its first callback began and its last one ended, in
    /// nanoseconds since the notes were made, as the request was routed
    /// (+1, so 0 is "not yet"): its trace span.
    first: AtomicU64,
    last: AtomicU64,
}

impl ChainNotes {
    /// Notes on a chain of the filters `names` of a request just routed
    /// (its filters' spans count from now, a few microseconds after the
    /// request came in).
    pub fn new(names: &Arc<[Arc<str>]>) -> Arc<ChainNotes> {
        Arc::new(ChainNotes {
            names: names.clone(),
            filters: names.iter().map(|_| FilterNote::default()).collect(),
            since: Instant::now(),
            local_response: OnceLock::new(),
            upstream: OnceLock::new(),
            function: OnceLock::new(),
        })
    }

    /// Keeps what `response` says about the node (or function) that
    /// answered it.
    pub fn note_endpoint<B>(&self, response: &hyper::Response<B>) {
        if let Some(served) = response.extensions().get::<UpstreamServed>() {
            let _ = self.upstream.set(served.clone());
        }
        if let Some(served) = response.extensions().get::<FunctionServed>() {
            let _ = self.function.set(served.clone());
        }
    }

    pub fn function(&self) -> Option<FunctionServed> {
        self.function.get().cloned()
    }

    pub fn upstream(&self) -> Option<UpstreamServed> {
        self.upstream.get().cloned()
    }

    /// Each filter's name and the time its callbacks took so far.
    pub fn times(&self) -> impl Iterator<Item = (&Arc<str>, Duration)> {
        self.names.iter().zip(&self.filters).map(|(name, note)| {
            (
                name,
                Duration::from_nanos(note.nanos.load(Ordering::Relaxed)),
            )
        })
    }

    /// Each filter that ran: its name, when its first callback began and
    /// its last ended (since the request came in), and its callbacks' time.
    pub fn spans(&self) -> impl Iterator<Item = (&str, Duration, Duration, Duration)> {
        let at = |nanos: &AtomicU64| Duration::from_nanos(nanos.load(Ordering::Relaxed) - 1);
        self.names
            .iter()
            .zip(&self.filters)
            .filter(|(_, note)| note.first.load(Ordering::Relaxed) != 0)
            .map(move |(name, note)| {
                let spent = Duration::from_nanos(note.nanos.load(Ordering::Relaxed));
                (&**name, at(&note.first), at(&note.last), spent)
            })
    }

    /// The filter that sent a local response, if one did.
    pub fn local_response(&self) -> Option<&str> {
        self.local_response.get().map(String::as_str)
    }

    fn spent(&self, filter: usize, since: Instant) {
        if let Some(note) = self.filters.get(filter) {
            let now = Instant::now();
            note.nanos.fetch_add(
                now.duration_since(since).as_nanos() as u64,
                Ordering::Relaxed,
            );
            let offset = |t: Instant| t.duration_since(self.since).as_nanos() as u64 + 1;
            let _ =
                note.first
                    .compare_exchange(0, offset(since), Ordering::Relaxed, Ordering::Relaxed);
            note.last.store(offset(now), Ordering::Relaxed);
        }
    }
}

impl Chain {
    /// Starts a stream on every filter; with `notes`, the time each filter
    /// takes is recorded there.
    pub async fn start(
        filters: &[RouteFilter],
        notes: Option<Arc<ChainNotes>>,
    ) -> Result<Chain, Stop> {
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
                        let stopped = [None; 2];
                        Chain {
                            links,
                            notes,
                            stopped,
                        }
                        .finish(&mut Box::default())
                        .await;
                        return Err(stop);
                    }
                    links.push(None);
                }
            }
        }
        Ok(Chain {
            links,
            notes,
            stopped: [None; 2],
        })
    }

    /// Whether the headers of `direction` are stopped at a filter (it holds
    /// them while it reads the body): nothing may be sent on yet.
    pub fn headers_stopped(&self, direction: Direction) -> bool {
        self.stopped[direction as usize].is_some()
    }

    /// The filter that `direction`'s callbacks run `k`-th (the response's
    /// run in reverse order, as Envoy's encoder filters do).
    fn nth(&self, direction: Direction, k: usize) -> usize {
        match direction {
            Direction::Request => k,
            Direction::Response => self.links.len() - 1 - k,
        }
    }

    /// The clock of filter `i`'s callback, when notes are kept.
    fn clock(&self) -> Option<Instant> {
        self.notes.as_ref().map(|_| Instant::now())
    }

    fn settle(
        &mut self,
        i: usize,
        started: Option<Instant>,
        result: Result<Flow, FilterError>,
    ) -> Result<Option<Flow>, Stop> {
        if let (Some(notes), Some(started)) = (&self.notes, started) {
            notes.spent(i, started);
            if matches!(result, Ok(Flow::Respond)) {
                if let Some(link) = &self.links[i] {
                    let _ = notes
                        .local_response
                        .set(link.stream.plugin().name().to_string());
                }
            }
        }
        settle(&mut self.links[i], result)
    }

    pub async fn headers(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        end_of_stream: bool,
    ) -> Result<(), Stop> {
        self.headers_from(direction, exchange, 0, end_of_stream)
            .await
    }

    /// Headers callbacks of the filters from the `from`-th in `direction`'s
    /// order on; a filter that stops them is remembered (`stopped`).
    async fn headers_from(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        from: usize,
        end_of_stream: bool,
    ) -> Result<(), Stop> {
        for k in from..self.links.len() {
            let i = self.nth(direction, k);
            let started = self.clock();
            let Some(link) = &mut self.links[i] else {
                continue;
            };
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
            if self.settle(i, started, result)? == Some(Flow::Stop) {
                self.stopped[direction as usize] = Some(i);
                return Ok(());
            }
        }
        Ok(())
    }

    /// The headers stopped at filter `i` go on to the filters after it (it
    /// continued, or dropped out).
    async fn resume_headers(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        i: usize,
    ) -> Result<(), Stop> {
        self.stopped[direction as usize] = None;
        // `nth` is its own inverse: filter `i` runs `nth(i)`-th.
        let next = self.nth(direction, i) + 1;
        self.headers_from(direction, exchange, next, false).await
    }

    /// Runs one body chunk through the chain. Returns the bytes that come out
    /// of the last filter (empty while some filter holds them, or holds
    /// the headers).
    pub async fn body_chunk(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
        mut data: Vec<u8>,
        end_of_stream: bool,
    ) -> Result<Vec<u8>, Stop> {
        // What `request.size` and `response.size` count: the request's bytes
        // as they come in, the response's as they go out.
        if direction == Direction::Request {
            exchange.info.request_body_bytes += data.len() as u64;
        }
        for k in 0..self.links.len() {
            let i = self.nth(direction, k);
            let started = self.clock();
            let Some(link) = &mut self.links[i] else {
                // A filter that held the headers and dropped out lets them on.
                if self.stopped[direction as usize] == Some(i) {
                    self.resume_headers(direction, exchange, i).await?;
                }
                continue;
            };
            let mut held = std::mem::take(&mut link.held);
            held.append(&mut data);
            *body_of(exchange, direction) = held;
            let result = match direction {
                Direction::Request => link.stream.on_request_body(exchange, end_of_stream).await,
                Direction::Response => link.stream.on_response_body(exchange, end_of_stream).await,
            };
            let out = std::mem::take(body_of(exchange, direction));
            match self.settle(i, started, result)? {
                Some(Flow::Buffer) => {
                    if let Some(link) = &mut self.links[i] {
                        link.held = out;
                    }
                    return Ok(Vec::new());
                }
                // Continue, or the filter dropped out (fail open): pass on,
                // the headers first if this filter held them.
                _ => {
                    if self.stopped[direction as usize] == Some(i) {
                        self.resume_headers(direction, exchange, i).await?;
                    }
                    data = out;
                }
            }
        }
        if direction == Direction::Response {
            exchange.info.response_body_bytes += data.len() as u64;
        }
        Ok(data)
    }

    /// Whether a whole response can go through [`Chain::response_whole`]:
    /// the chain is one filter, still in it, whose stream has begun.
    /// (With more filters the host must call each filter's headers
    /// callback before any body callback, as Envoy does.)
    pub fn takes_whole_responses(&mut self) -> bool {
        let stopped = self.headers_stopped(Direction::Response);
        match self.links.as_mut_slice() {
            [Some(link)] => !stopped && link.stream.takes_whole_responses(),
            _ => false,
        }
    }

    /// A response whose body is all here (`data`) through the chain's one
    /// filter, its headers, body and end callbacks in one guest call as far
    /// as each goes on (batch.rs); where one stops, the request goes on as
    /// after that callback alone. Only where [`Chain::takes_whole_responses`].
    pub async fn response_whole(
        &mut self,
        exchange: &mut Box<HttpExchange>,
        data: Vec<u8>,
    ) -> Result<WholeResponse, Stop> {
        let started = self.clock();
        let link = (self.links[0].as_mut()).expect("takes_whole_responses: the chain's one filter");
        let result = link.stream.on_response_whole(exchange, data).await;
        let out = match result {
            Ok(Whole::Headers(flow, data)) => {
                if self.settle(0, started, Ok(flow))? == Some(Flow::Stop) {
                    self.stopped[Direction::Response as usize] = Some(0);
                }
                return Ok(WholeResponse::Headers(data));
            }
            Ok(Whole::Ended(out)) => {
                self.settle(0, started, Ok(Flow::Continue))?;
                if let Some(link) = self.links[0].take() {
                    link.stream.ended();
                }
                // `response.size` was counted before `proxy_on_log` (batch.rs).
                return Ok(WholeResponse::Ended(out));
            }
            // The body as the filter left it (or as it came, when the
            // headers callback failed): a fail-open filter lets it on.
            Ok(Whole::Body(flow)) => {
                let out = std::mem::take(&mut exchange.response_body);
                self.settle(0, started, Ok(flow))?;
                out
            }
            Err(error) => {
                let out = std::mem::take(&mut exchange.response_body);
                self.settle(0, started, Err(error))?;
                out
            }
        };
        exchange.info.response_body_bytes += out.len() as u64;
        Ok(WholeResponse::Body(out))
    }

    /// Trailers callbacks. Headers still stopped at a filter go on first:
    /// the trailers end the body, so no body callback will continue them.
    pub async fn trailers(
        &mut self,
        direction: Direction,
        exchange: &mut Box<HttpExchange>,
    ) -> Result<(), Stop> {
        if let Some(i) = self.stopped[direction as usize] {
            self.resume_headers(direction, exchange, i).await?;
        }
        for k in 0..self.links.len() {
            let i = self.nth(direction, k);
            let started = self.clock();
            let Some(link) = &mut self.links[i] else {
                continue;
            };
            let result = match direction {
                Direction::Request => link.stream.on_request_trailers(exchange).await,
                Direction::Response => link.stream.on_response_trailers(exchange).await,
            };
            self.settle(i, started, result)?;
        }
        Ok(())
    }

    /// The response callbacks of a local reply made while the request was
    /// filtered (it is in the exchange's response headers and body): Envoy
    /// sends such a reply through the filters' response callbacks, those
    /// whose stream began (a filter after the one that answered never saw
    /// the request). A filter may edit the reply there (CORS headers on a
    /// preflight); a second local reply or a failure there leaves the
    /// first as it is.
    pub async fn local_reply(&mut self, exchange: &mut Box<HttpExchange>) {
        let body = std::mem::take(&mut exchange.response_body);
        let has_body = !body.is_empty();
        for k in 0..self.links.len() {
            let i = self.nth(Direction::Response, k);
            let started = self.clock();
            let Some(link) = self.links[i].as_mut().filter(|l| l.stream.started()) else {
                continue;
            };
            let result = link.stream.on_response_headers(exchange, !has_body).await;
            exchange.local_response = None;
            let _ = self.settle(i, started, result);
        }
        exchange.response_body = body;
        if !has_body {
            return;
        }
        for k in 0..self.links.len() {
            let i = self.nth(Direction::Response, k);
            let started = self.clock();
            let Some(link) = self.links[i].as_mut().filter(|l| l.stream.started()) else {
                continue;
            };
            let result = link.stream.on_response_body(exchange, true).await;
            exchange.local_response = None;
            let _ = self.settle(i, started, result);
        }
    }

    /// `proxy_on_log` / `on_done` / `on_delete` on every stream; instances go back.
    pub async fn finish(mut self, exchange: &mut Box<HttpExchange>) {
        for link in std::mem::take(&mut self.links).into_iter().flatten() {
            let plugin = link.stream.plugin().clone();
            if let Err(error) = link.stream.finish(exchange).await {
                let plugin = plugin.name();
                tracing::warn!(%plugin, %error, "filter failed while finishing the stream");
            }
        }
    }
}

/// A chain dropped before `finish` (its request went away): each stream
/// still ends its context, as Envoy does, on a task of its own
/// ([`FilterStream::end_detached`]).
impl Drop for Chain {
    fn drop(&mut self) {
        for link in std::mem::take(&mut self.links).into_iter().flatten() {
            link.stream.end_detached();
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
        Ok(Flow::Stop) => Ok(Some(Flow::Stop)),
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
