//! The access log: one line per request, JSON lines with fixed field names
//! or a text line with named fields (nginx's look, with names).
//!
//! The request's side fills an [`Entry`] and formats its line (line.rs)
//! into a buffer of its thread's ([`AccessLog::record`]); a thread of its
//! own takes every thread's buffer every few milliseconds and writes each
//! with one call. A buffer that has grown past its limit (a disk slower
//! than the traffic) drops the line and counts it; a failed write counts
//! too: both show in `/metrics`. `reopen` (SIGUSR1, logrotate's
//! convention) makes the writer open the file again by its path before
//! the next batch.

use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use crate::line::{self, Clock};

mod entry;
#[cfg(test)]
mod tests;

pub use entry::{millis, Entry, FilterTime, Format, LogStats, Target};

/// How often the writer takes the lines recorded since it last looked.
const BATCH_INTERVAL: Duration = Duration::from_millis(20);

/// How often it looks once it found nothing [`QUIET_ROUNDS`] times in a
/// row: an idle node's writer wakes 10 times a second, not 50. The first
/// lines after a pause wait at most this long, and a thread's buffer holds
/// them (at 100,000 lines a second from one thread, 3.3 MB of its 4 MiB).
const RESTING_INTERVAL: Duration = Duration::from_millis(100);
const QUIET_ROUNDS: u32 = 10;

/// How many of the last requests are kept in memory for the dashboard.
pub const RECENT: usize = 500;

/// A running access log: where the request threads put their lines, the
/// reopen flag and the writer's counters.
pub struct AccessLog {
    /// This log's number, telling its buffers apart from another log's in
    /// a thread's cache (tests start several logs in one process).
    id: usize,
    shared: Arc<Shared>,
    target: Target,
    format: Format,
}

/// What the request threads and the writer share.
struct Shared {
    /// Every thread's buffer, in the order the threads first logged.
    buffers: Mutex<Vec<Arc<Mutex<Lines>>>>,
    reopen: AtomicBool,
    stats: LogStats,
    /// The last [`RECENT`] requests written (the writer keeps them, off
    /// the request path).
    recent: Mutex<Recent>,
}

/// One request thread's lines since the writer last took them. Only that
/// thread and the writer (every [`BATCH_INTERVAL`]) lock it, so the lock
/// is almost never contended.
#[derive(Default)]
struct Lines {
    /// The lines as the log has them.
    text: Vec<u8>,
    /// In the text format, the same lines as JSON, for the dashboard's
    /// list (in the JSON format `text` serves both).
    json: Vec<u8>,
    /// When each of the requests in `json` (or `text` in the JSON format)
    /// came in: the dashboard's list orders requests by it, since request
    /// ids are counted per thread and the threads' lines reach the writer
    /// in rounds (a request's line can be taken after a later request's).
    arrivals: Vec<Instant>,
    /// Lines in `text` the writer has not taken yet.
    pending: u64,
    /// Lines put here so far (dropped ones not counted).
    recorded: u64,
}

/// A thread's buffer stops taking lines past this size (counted as lost):
/// at the writer's pace that is over 100,000 lines a second from one
/// thread; more only piles up when the disk does not keep up.
const BUFFER_LIMIT: usize = 4 << 20;

/// The next [`AccessLog`]'s number.
static LOGS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's buffer of each log it has written to (one, but for tests).
    static BUFFERS: RefCell<Vec<(usize, Arc<Mutex<Lines>>)>> = const { RefCell::new(Vec::new()) };
    /// The wall clock and the monotonic clock read together, at most once
    /// a second per thread: a line's time is worked out from them and the
    /// request's arrival, without a clock reading of its own.
    static CLOCK: Cell<Option<Clock>> = const { Cell::new(None) };
}

impl AccessLog {
    /// Opens `target` (a file is created if missing and appended to) and
    /// starts the writer thread.
    pub fn start(target: Target, format: Format) -> std::io::Result<AccessLog> {
        let sink = Sink::open(&target)?;
        let shared = Arc::new(Shared {
            buffers: Mutex::default(),
            reopen: AtomicBool::new(false),
            stats: LogStats::default(),
            recent: Mutex::default(),
        });
        let writer = Writer {
            shared: Arc::downgrade(&shared),
            sink,
            target: target.clone(),
            format,
        };
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || writer.run())?;
        Ok(AccessLog {
            id: LOGS.fetch_add(1, Ordering::Relaxed),
            shared,
            target,
            format,
        })
    }

    /// Formats `entry`'s line into this thread's buffer; never waits for
    /// the disk. A buffer the writer has not emptied for a while (a disk
    /// slower than the traffic) drops the line and counts it.
    ///
    /// The line is formatted here rather than on the writer's thread: that
    /// way the entry is never sent between threads (no queue slot, no
    /// allocation freed on another thread, no cache lines moving between
    /// cores) and the writer only writes bytes (docs/benchmarks.md).
    pub fn record(&self, entry: Entry) {
        let time = wall_time(entry.began);
        BUFFERS.with(|buffers| {
            let mut buffers = buffers.borrow_mut();
            let lines = match buffers.iter().find(|(id, _)| *id == self.id) {
                Some((_, lines)) => lines,
                None => {
                    let lines = Arc::new(Mutex::new(Lines::default()));
                    lock(&self.shared.buffers).push(lines.clone());
                    buffers.push((self.id, lines));
                    &buffers.last().expect("just pushed").1
                }
            };
            let mut lines = lock(lines);
            if lines.text.len() >= BUFFER_LIMIT {
                drop(lines);
                self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            lines.pending += 1;
            lines.recorded += 1;
            lines
                .arrivals
                .push(entry.began.unwrap_or_else(Instant::now));
            match self.format {
                Format::Json => line::json(&entry, time, &mut lines.text),
                Format::Text => {
                    line::text(&entry, time, &mut lines.text);
                    line::json(&entry, time, &mut lines.json);
                }
            }
        });
    }

    /// Waits (at most `limit`) until every line recorded so far is written
    /// and flushed: what a server does before it exits, so a graceful
    /// shutdown keeps the last requests' lines. True when it got there.
    pub fn drain(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        let recorded: u64 = lock(&self.shared.buffers)
            .iter()
            .map(|lines| lock(lines).recorded)
            .sum();
        while self.shared.stats.handled.load(Ordering::Acquire) < recorded {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Opens the file again by its path before the next line (after
    /// logrotate moved it away). Stdout has nothing to reopen.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
    }

    pub fn stats(&self) -> &LogStats {
        &self.shared.stats
    }

    /// Up to `limit` of the last requests whose route and status `keep`
    /// accepts, newest first, as their JSON lines' objects (read back
    /// here, when the dashboard asks, rather than kept apart per request).
    pub fn recent(&self, keep: impl Fn(&str, u16) -> bool, limit: usize) -> Vec<serde_json::Value> {
        let recent = lock(&self.shared.recent);
        recent
            .newest_first()
            .into_iter()
            .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
            .filter(|value| {
                let route = value["route"].as_str().unwrap_or("");
                let status = value["status"].as_u64().unwrap_or(0);
                keep(route, u16::try_from(status).unwrap_or(0))
            })
            .take(limit)
            .collect()
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub fn format(&self) -> Format {
        self.format
    }
}

/// When a request that came in at `began` did so on the wall clock, from
/// this thread's clock pair (read again when it is a second old).
fn wall_time(began: Option<Instant>) -> SystemTime {
    let Some(began) = began else {
        return SystemTime::now();
    };
    CLOCK.with(|clock| {
        let pair = match clock.get() {
            Some(pair) if began.saturating_duration_since(pair.instant) < CLOCK_AGE => pair,
            _ => {
                let pair = Clock::now();
                clock.set(Some(pair));
                pair
            }
        };
        pair.wall(began)
    })
}

/// How old a thread's clock pair may get before it is read again: a wall
/// clock stepped by NTP shows in the log within this.
const CLOCK_AGE: Duration = Duration::from_secs(1);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

static GLOBAL: OnceLock<AccessLog> = OnceLock::new();

/// Makes `log` the process's access log (the first call wins): the node's
/// listeners all write to it, and a reload keeps it.
pub fn install(log: AccessLog) {
    let _ = GLOBAL.set(log);
}

/// The process's access log, if one was installed (it is off otherwise).
pub fn global() -> Option<&'static AccessLog> {
    GLOBAL.get()
}

/// Where the batches go: each is one `write_all`, so no buffer of ours.
enum Sink {
    Stdout(std::io::Stdout),
    File(File),
}

impl Sink {
    fn open(target: &Target) -> std::io::Result<Sink> {
        Ok(match target {
            Target::Stdout => Sink::Stdout(std::io::stdout()),
            Target::File(path) => {
                Sink::File(OpenOptions::new().create(true).append(true).open(path)?)
            }
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(w) => w,
            Sink::File(w) => w,
        }
    }
}

struct Writer {
    /// Weak: the writer ends when its log is dropped (a test's log).
    shared: Weak<Shared>,
    sink: Sink,
    target: Target,
    format: Format,
}

impl Writer {
    /// Writes the threads' lines, in batches: every [`BATCH_INTERVAL`] it
    /// swaps each thread's buffer for an empty one and writes what it took
    /// with one call per thread.
    fn run(mut self) {
        // One batch per thread's buffer, swapped with it every round.
        let mut batches: Vec<Lines> = Vec::new();
        let mut quiet_rounds = 0;
        loop {
            // The writer looks every few milliseconds rather than being
            // woken: a woken writer would cost every request a system call.
            std::thread::sleep(if quiet_rounds >= QUIET_ROUNDS {
                RESTING_INTERVAL
            } else {
                BATCH_INTERVAL
            });
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            if shared.reopen.swap(false, Ordering::Relaxed) {
                self.reopen_sink(&shared.stats);
            }
            let buffers: Vec<_> = lock(&shared.buffers).clone();
            batches.resize_with(buffers.len(), Lines::default);
            let mut handled = 0;
            for (buffer, batch) in buffers.iter().zip(&mut batches) {
                batch.text.clear();
                batch.json.clear();
                batch.arrivals.clear();
                let mut lines = lock(buffer);
                // The emptied buffers go back, so both sides keep their
                // capacity.
                std::mem::swap(&mut lines.text, &mut batch.text);
                std::mem::swap(&mut lines.json, &mut batch.json);
                std::mem::swap(&mut lines.arrivals, &mut batch.arrivals);
                let taken = std::mem::take(&mut lines.pending);
                drop(lines);
                if taken > 0 {
                    self.write(&shared.stats, batch, taken);
                    handled += taken;
                }
            }
            if handled > 0 {
                let json = batches.iter().map(|batch| {
                    let json = match self.format {
                        Format::Json => batch.text.as_slice(),
                        Format::Text => batch.json.as_slice(),
                    };
                    (json, batch.arrivals.as_slice())
                });
                lock(&shared.recent).keep(json);
                shared.stats.handled.fetch_add(handled, Ordering::Release);
                quiet_rounds = 0;
            } else {
                quiet_rounds = quiet_rounds.saturating_add(1);
            }
        }
    }

    /// One thread's `taken` lines to the sink.
    fn write(&mut self, stats: &LogStats, batch: &Lines, taken: u64) {
        let written = self.sink.writer().write_all(&batch.text);
        let written = written.and_then(|()| self.sink.writer().flush());
        let counter = match written {
            Ok(()) => &stats.lines,
            Err(_) => &stats.write_errors,
        };
        counter.fetch_add(taken, Ordering::Relaxed);
    }

    fn reopen_sink(&mut self, stats: &LogStats) {
        let _ = self.sink.writer().flush();
        match Sink::open(&self.target) {
            Ok(sink) => {
                self.sink = sink;
                stats.reopened.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target = ?self.target, "access log reopened");
            }
            // The old file stays open: lines keep going somewhere.
            Err(error) => {
                tracing::error!(target = ?self.target, %error, "cannot reopen the access log; writing on to the file open before")
            }
        }
    }
}

/// The last [`RECENT`] requests' JSON lines, as a ring of slots whose
/// buffers are reused: keeping a request costs a copy of its line, not an
/// allocation.
#[derive(Default)]
struct Recent {
    /// Each request's arrival and its line.
    slots: Vec<(Instant, Vec<u8>)>,
    /// Requests kept so far: the n-th went to slot `n % RECENT`.
    kept: usize,
}

impl Recent {
    /// Keeps the newest lines of a round's batches (JSON lines, each with
    /// its newline, and each line's arrival; one batch per thread). Of a
    /// batch longer than the ring only its last lines matter, so each is
    /// read from its end; of the round's lines the latest arrivals are
    /// kept.
    fn keep<'a>(&mut self, batches: impl Iterator<Item = (&'a [u8], &'a [Instant])>) {
        let mut lines: Vec<(Instant, &[u8])> = Vec::new();
        for (json, arrivals) in batches {
            let mut end = json.len();
            for &arrival in arrivals.iter().rev().take(RECENT) {
                if end == 0 {
                    break;
                }
                // `end` is just past a line's newline; the line begins
                // after the newline before it.
                let start = memchr::memrchr(b'\n', &json[..end - 1]).map_or(0, |at| at + 1);
                lines.push((arrival, &json[start..end]));
                end = start;
            }
        }
        lines.sort_by_key(|&(arrival, _)| arrival);
        for &(arrival, line) in &lines[lines.len().saturating_sub(RECENT)..] {
            let at = self.kept % RECENT;
            self.kept += 1;
            if at == self.slots.len() {
                self.slots.push((arrival, Vec::new()));
            }
            let slot = &mut self.slots[at];
            slot.0 = arrival;
            slot.1.clear();
            slot.1.extend_from_slice(line);
        }
    }

    /// The kept lines, latest arrival first. A round can hold a request
    /// that came in before one an earlier round kept (its line was
    /// written a little later), so the ring's order is not enough.
    fn newest_first(&self) -> Vec<&[u8]> {
        let mut slots: Vec<&(Instant, Vec<u8>)> = self.slots.iter().collect();
        slots.sort_by_key(|slot| std::cmp::Reverse(slot.0));
        slots.into_iter().map(|(_, line)| line.as_slice()).collect()
    }
}

/// `entry` as one line (with its newline) in `format`, for a request that
/// came in at `time`.
pub fn format_line(entry: &Entry, format: Format, time: SystemTime, out: &mut Vec<u8>) {
    match format {
        Format::Json => line::json(entry, time, out),
        Format::Text => line::text(entry, time, out),
    }
}
