//! The access log: one line per request, JSON lines with fixed field names
//! or a text line with named fields (nginx's look, with names).
//!
//! The request's side only fills an [`Entry`] and hands it to a bounded
//! queue ([`AccessLog::record`]); a thread of its own takes what is queued
//! every few milliseconds, formats it (line.rs) and writes it with one
//! call. A full queue (a disk slower than the traffic) drops the line and
//! counts it; a failed write counts too: both show in `/metrics`. `reopen`
//! (SIGUSR1, logrotate's convention) makes the thread open the file again
//! by its path before the next line.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::line::{self, Clock};

/// How many lines may wait for the writer before new ones are dropped:
/// a few seconds of a busy node's traffic.
const QUEUE_LINES: usize = 16 * 1024;

/// How often the writer takes the lines queued since it last looked.
const BATCH_INTERVAL: Duration = Duration::from_millis(20);

/// How many of the last requests are kept in memory for the dashboard.
pub const RECENT: usize = 500;

/// How a line looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line (the fields of [`Entry`]).
    Json,
    /// `client [time] "METHOD host/path PROTO" status bytes name=value...`
    Text,
}

/// Where lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stdout,
    File(PathBuf),
}

/// One request, as the log shows it (docs/observability.md lists the
/// fields of its line, whose names are fixed: log pipelines key on them).
/// The request's side fills it with what it has at hand, cheaply (shared
/// names, times as durations, ids as bytes); the writer turns it into text.
#[derive(Clone, Debug, Default)]
pub struct Entry {
    /// When the request came in; the writer puts it on the wall clock
    /// (one clock reading per batch rather than one per request).
    pub began: Option<Instant>,
    pub request_id: u64,
    pub client: Option<SocketAddr>,
    pub method: Cow<'static, str>,
    pub host: String,
    /// Path and query, as the client sent them.
    pub path: String,
    /// `HTTP/1.1`, `HTTP/2`, `HTTP/1.0`.
    pub protocol: &'static str,
    pub status: u16,
    /// Request body bytes read from the client.
    pub bytes_in: u64,
    /// Response body bytes sent to the client.
    pub bytes_out: u64,
    /// From the request's arrival to its response's last byte.
    pub duration: Duration,
    /// The route that matched (none: no route did).
    pub route: Option<Arc<str>>,
    /// The upstream node that answered (`host:port`), if one did.
    pub upstream: Option<Arc<str>>,
    /// From sending the request to the node until its response head.
    pub upstream_time: Option<Duration>,
    /// The filters that ran, in chain order, with the time their callbacks took.
    pub filters: Vec<FilterTime>,
    /// The filter that answered the request itself, if one did.
    pub local_response: Option<String>,
    /// The kind of the gateway's own error answer (`no_route`,
    /// `upstream_unavailable`, ...), if the answer was one.
    pub error: Option<String>,
    /// The W3C trace id the request belongs to, when tracing knows it.
    pub trace_id: Option<[u8; 16]>,
}

/// A filter's share of a request.
#[derive(Clone, Debug)]
pub struct FilterTime {
    pub name: Arc<str>,
    pub time: Duration,
}

/// Milliseconds with microseconds, for trace attributes.
pub fn millis(duration: Duration) -> f64 {
    (duration.as_micros() as f64) / 1000.0
}

/// Counters of the log, for `/metrics`.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Lines written.
    pub lines: AtomicU64,
    /// Lines dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Lines lost to a failed write (or a file that could not be opened).
    pub write_errors: AtomicU64,
    /// Times the file was opened again (SIGUSR1).
    pub reopened: AtomicU64,
    /// Entries queued, and entries the writer has written (or lost to a
    /// write error) and flushed: equal when nothing waits ([`AccessLog::drain`]).
    queued: AtomicU64,
    handled: AtomicU64,
}

/// A running access log: the queue's sending side and the writer's counters.
pub struct AccessLog {
    queue: SyncSender<Entry>,
    reopen: Arc<AtomicBool>,
    stats: Arc<LogStats>,
    /// The last [`RECENT`] requests written (the writer keeps them, off
    /// the request path).
    recent: Arc<Mutex<Recent>>,
    target: Target,
    format: Format,
}

impl AccessLog {
    /// Opens `target` (a file is created if missing and appended to) and
    /// starts the writer thread.
    pub fn start(target: Target, format: Format) -> std::io::Result<AccessLog> {
        let sink = Sink::open(&target)?;
        let (queue, lines) = sync_channel(QUEUE_LINES);
        let reopen = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LogStats::default());
        let recent = Arc::new(Mutex::new(Recent::default()));
        let writer = Writer {
            lines,
            sink,
            target: target.clone(),
            format,
            reopen: reopen.clone(),
            stats: stats.clone(),
            recent: recent.clone(),
        };
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || writer.run())?;
        Ok(AccessLog {
            queue,
            reopen,
            stats,
            recent,
            target,
            format,
        })
    }

    /// Queues `entry`; never waits. A full queue drops it (counted).
    pub fn record(&self, entry: Entry) {
        match self.queue.try_send(entry) {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits (at most `limit`) until every line queued so far is written
    /// and flushed: what a server does before it exits, so a graceful
    /// shutdown keeps the last requests' lines. True when it got there.
    pub fn drain(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        let queued = self.stats.queued.load(Ordering::Relaxed);
        while self.stats.handled.load(Ordering::Acquire) < queued {
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
        self.reopen.store(true, Ordering::Relaxed);
    }

    pub fn stats(&self) -> &LogStats {
        &self.stats
    }

    /// Up to `limit` of the last requests whose route and status `keep`
    /// accepts, newest first, as their JSON lines' objects.
    pub fn recent(&self, keep: impl Fn(&str, u16) -> bool, limit: usize) -> Vec<serde_json::Value> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .newest_first()
            .filter(|kept| keep(&kept.route, kept.status))
            .take(limit)
            .filter_map(|kept| serde_json::from_slice(&kept.line).ok())
            .collect()
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub fn format(&self) -> Format {
        self.format
    }
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
    lines: Receiver<Entry>,
    sink: Sink,
    target: Target,
    format: Format,
    reopen: Arc<AtomicBool>,
    stats: Arc<LogStats>,
    recent: Arc<Mutex<Recent>>,
}

impl Writer {
    /// Writes the lines queued, in batches: each batch's lines are
    /// formatted into one buffer and written with one call.
    fn run(mut self) {
        let mut batch = Vec::with_capacity(64 * 1024);
        loop {
            // The writer looks at the queue every few milliseconds rather
            // than waiting on it: a waiting reader would have every request
            // wake it (a system call per line); this way a request's only
            // cost is the queue slot, and lines are written in batches.
            std::thread::sleep(BATCH_INTERVAL);
            if self.reopen.swap(false, Ordering::Relaxed) {
                self.reopen_sink();
            }
            let mut next = match self.lines.try_recv() {
                Ok(entry) => Some(entry),
                Err(TryRecvError::Empty) => continue,
                Err(TryRecvError::Disconnected) => break,
            };
            let clock = Clock::now();
            let mut taken = 0;
            batch.clear();
            while let Some(entry) = next.take() {
                taken += 1;
                self.format(&entry, &clock, &mut batch);
                next = self.lines.try_recv().ok();
            }
            let written = self.sink.writer().write_all(&batch);
            let written = written.and_then(|()| self.sink.writer().flush());
            let counter = match written {
                Ok(()) => &self.stats.lines,
                Err(_) => &self.stats.write_errors,
            };
            counter.fetch_add(taken, Ordering::Relaxed);
            self.stats.handled.fetch_add(taken, Ordering::Release);
        }
    }

    /// `entry`'s line onto `batch`; its JSON line is also what the
    /// dashboard's list keeps (formatted once when the log is JSON).
    fn format(&self, entry: &Entry, clock: &Clock, batch: &mut Vec<u8>) {
        let time = clock.wall(entry.began);
        let start = batch.len();
        match self.format {
            Format::Json => line::json(entry, time, batch),
            Format::Text => line::text(entry, time, batch),
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let kept = recent.next_slot(entry);
        match self.format {
            Format::Json => kept.line.extend_from_slice(&batch[start..]),
            Format::Text => line::json(entry, time, &mut kept.line),
        }
    }

    fn reopen_sink(&mut self) {
        let _ = self.sink.writer().flush();
        match Sink::open(&self.target) {
            Ok(sink) => {
                self.sink = sink;
                self.stats.reopened.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target = ?self.target, "access log reopened");
            }
            // The old file stays open: lines keep going somewhere.
            Err(error) => {
                tracing::error!(target = ?self.target, %error, "cannot reopen the access log; writing on to the file open before")
            }
        }
    }
}

/// The last [`RECENT`] requests, as a ring of slots whose buffers are
/// reused: keeping a request costs a copy of its line, not an allocation.
#[derive(Default)]
struct Recent {
    slots: Vec<Kept>,
    /// Requests kept so far: the n-th went to slot `n % RECENT`.
    kept: usize,
}

#[derive(Default)]
struct Kept {
    route: String,
    status: u16,
    /// Its JSON line, with the newline.
    line: Vec<u8>,
}

impl Recent {
    /// The slot for `entry` (the oldest one's, once the ring is full),
    /// with its route and status set and its line empty.
    fn next_slot(&mut self, entry: &Entry) -> &mut Kept {
        let at = self.kept % RECENT;
        self.kept += 1;
        if at == self.slots.len() {
            self.slots.push(Kept::default());
        }
        let kept = &mut self.slots[at];
        kept.route.clear();
        kept.route.push_str(entry.route.as_deref().unwrap_or(""));
        kept.status = entry.status;
        kept.line.clear();
        kept
    }

    fn newest_first(&self) -> impl Iterator<Item = &Kept> {
        (1..=self.slots.len()).map(move |back| &self.slots[(self.kept - back) % RECENT])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The time the example lines show.
    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_120)
    }

    fn entry() -> Entry {
        Entry {
            request_id: 7,
            client: Some("127.0.0.1:5000".parse().unwrap()),
            method: "GET".into(),
            host: "shop.example".into(),
            path: "/a?b=1".into(),
            protocol: "HTTP/1.1",
            status: 200,
            bytes_out: 12,
            duration: Duration::from_micros(1500),
            route: Some("api".into()),
            upstream: Some("127.0.0.1:9000".into()),
            upstream_time: Some(Duration::from_micros(1250)),
            filters: vec![FilterTime {
                name: "auth".into(),
                time: Duration::from_micros(250),
            }],
            trace_id: Some(*b"0123456789abcdef"),
            ..Entry::default()
        }
    }

    #[test]
    fn json_lines_have_the_fixed_fields() {
        let mut line = Vec::new();
        let entry = entry();
        format_line(&entry, Format::Json, at(), &mut line);
        assert_eq!(line.last(), Some(&b'\n'));
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["time"], "2023-11-14T22:13:20.120Z");
        assert_eq!(value["route"], "api");
        assert_eq!(value["filters"][0]["name"], "auth");
        assert_eq!(value["upstream_ms"], 1.25);
        assert!(value["local_response"].is_null());
        assert_eq!(value["trace_id"], "30313233343536373839616263646566");
        assert_eq!(value["client"], "127.0.0.1:5000");
        // The names docs/observability.md lists, in its order.
        let text = String::from_utf8(line).unwrap();
        let names = [
            "time",
            "request_id",
            "client",
            "method",
            "host",
            "path",
            "protocol",
            "status",
            "bytes_in",
            "bytes_out",
            "duration_ms",
            "route",
            "upstream",
            "upstream_ms",
            "filters",
            "local_response",
            "error",
            "trace_id",
        ];
        let at: Vec<usize> = names
            .iter()
            .map(|name| text.find(&format!("\"{name}\":")).expect(name))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert_eq!(value.as_object().unwrap().len(), names.len());
    }

    #[test]
    fn text_lines_name_their_fields() {
        let mut line = Vec::new();
        let entry = entry();
        format_line(&entry, Format::Text, at(), &mut line);
        let line = String::from_utf8(line).unwrap();
        assert!(line.starts_with(
            "127.0.0.1:5000 [2023-11-14T22:13:20.120Z] \"GET shop.example/a?b=1 HTTP/1.1\" 200 12 in=0 ms=1.500 route=api upstream=127.0.0.1:9000"
        ), "{line}");
        assert!(
            line.contains(
                " filters=auth:0.250 local=- error=- id=7 trace=30313233343536373839616263646566\n"
            ),
            "{line}"
        );
    }

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::start(Target::File(path.clone()), Format::Json).unwrap();
        log.record(entry());
        let wait = |path: &std::path::Path, lines: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                if text.lines().count() >= lines {
                    return text;
                }
                assert!(std::time::Instant::now() < deadline, "{text}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait(&path, 1);
        let rotated = dir.path().join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen();
        // The writer reopens before its next line (or within its wake-up).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while log.stats().reopened.load(Ordering::Relaxed) == 0 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(10));
        }
        log.record(entry());
        wait(&path, 1);
        assert_eq!(wait(&rotated, 1).lines().count(), 1);
        assert_eq!(log.stats().lines.load(Ordering::Relaxed), 2);
        assert_eq!(log.recent(|route, _| route == "api", 10).len(), 2);
        // Drained: nothing queued is left unwritten.
        log.record(entry());
        assert!(log.drain(Duration::from_secs(10)));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        assert!(log.recent(|_, status| status == 500, 10).is_empty());
    }

    #[test]
    fn the_dashboards_list_keeps_the_newest_requests() {
        let dir = tempfile::tempdir().unwrap();
        let log = AccessLog::start(Target::File(dir.path().join("a.log")), Format::Text).unwrap();
        for id in 0..(RECENT as u64 + 10) {
            log.record(Entry {
                request_id: id,
                status: if id % 2 == 0 { 200 } else { 500 },
                ..entry()
            });
        }
        assert!(log.drain(Duration::from_secs(10)));
        let all = log.recent(|_, _| true, RECENT);
        assert_eq!(all.len(), RECENT);
        assert_eq!(all[0]["request_id"], RECENT as u64 + 9);
        assert_eq!(all[RECENT - 1]["request_id"], 10);
        let failed = log.recent(|_, status| status == 500, 3);
        let ids: Vec<u64> = failed
            .iter()
            .map(|e| e["request_id"].as_u64().unwrap())
            .collect();
        assert_eq!(
            ids,
            [RECENT as u64 + 9, RECENT as u64 + 7, RECENT as u64 + 5]
        );
    }
}
