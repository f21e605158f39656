//! The access log: one line per request, JSON lines with fixed field names
//! or a text line with named fields (nginx's look, with names).
//!
//! The request's side only fills an [`Entry`] and hands it to a bounded
//! queue ([`AccessLog::record`]); a thread of its own formats and writes the
//! lines, flushing whenever the queue runs dry. A full queue (a disk slower
//! than the traffic) drops the line and counts it; a failed write counts
//! too: both show in `/metrics`. `reopen` (SIGUSR1, logrotate's convention)
//! makes the thread open the file again by its path before the next line.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde::Serialize;

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

/// One request, as the log shows it. Field names are fixed: log pipelines
/// key on them (docs/observability.md lists them).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Entry {
    /// When the request came in.
    #[serde(serialize_with = "rfc3339")]
    pub time: Option<SystemTime>,
    pub request_id: u64,
    /// The client's address and port (formatted by the writer).
    #[serde(serialize_with = "display")]
    pub client: Option<SocketAddr>,
    pub method: String,
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
    pub duration_ms: f64,
    /// The route that matched (empty: none did).
    pub route: String,
    /// The upstream node that answered (`host:port`), if one did.
    pub upstream: Option<String>,
    /// From sending the request to the node until its response head.
    pub upstream_ms: Option<f64>,
    /// The filters that ran, in chain order, with the time their callbacks took.
    pub filters: Vec<FilterTime>,
    /// The filter that answered the request itself, if one did.
    pub local_response: Option<String>,
    /// The kind of the gateway's own error answer (`no_route`,
    /// `upstream_unavailable`, ...), if the answer was one.
    pub error: Option<String>,
    /// The W3C trace id the request belongs to, when tracing knows it.
    pub trace_id: Option<String>,
}

/// A filter's share of a request.
#[derive(Clone, Debug, Serialize)]
pub struct FilterTime {
    pub name: String,
    pub ms: f64,
}

fn display<S: serde::Serializer>(addr: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
    match addr {
        Some(addr) => s.collect_str(addr),
        None => s.serialize_none(),
    }
}

fn rfc3339<S: serde::Serializer>(time: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_time(time.unwrap_or(SystemTime::UNIX_EPOCH)))
}

/// RFC 3339 in UTC with exactly three fraction digits (fixed width: lines
/// line up, and readers can cut the time of day out by position). The
/// date and time of day are worked out once per second (the writer's lines
/// mostly share their second); only the milliseconds change in between.
fn format_time(time: SystemTime) -> String {
    thread_local! {
        static SECOND: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != since.as_secs() {
            let t = time::OffsetDateTime::from(time);
            second.1 = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            );
            second.0 = since.as_secs();
        }
        let mut out = String::with_capacity(24);
        out.push_str(&second.1);
        let millis = since.subsec_millis();
        out.push('.');
        out.push(char::from(b'0' + (millis / 100) as u8));
        out.push(char::from(b'0' + (millis / 10 % 10) as u8));
        out.push(char::from(b'0' + (millis % 10) as u8));
        out.push('Z');
        out
    })
}

/// Milliseconds with microseconds, for the duration fields.
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
    /// The last [`RECENT`] entries written, oldest first (the writer keeps
    /// it, off the request path).
    recent: Arc<Mutex<VecDeque<Entry>>>,
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
        let recent = Arc::new(Mutex::new(VecDeque::with_capacity(RECENT)));
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

    /// Up to `limit` of the last requests that `keep` accepts, newest first.
    pub fn recent(&self, keep: impl Fn(&Entry) -> bool, limit: usize) -> Vec<Entry> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .rev()
            .filter(|e| keep(e))
            .take(limit)
            .cloned()
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

enum Sink {
    Stdout(BufWriter<std::io::Stdout>),
    File(BufWriter<File>),
}

impl Sink {
    fn open(target: &Target) -> std::io::Result<Sink> {
        Ok(match target {
            Target::Stdout => Sink::Stdout(BufWriter::new(std::io::stdout())),
            Target::File(path) => Sink::File(BufWriter::new(
                OpenOptions::new().create(true).append(true).open(path)?,
            )),
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
    recent: Arc<Mutex<VecDeque<Entry>>>,
}

impl Writer {
    /// Writes the lines queued, in batches, flushing after each.
    fn run(mut self) {
        let mut line = Vec::with_capacity(512);
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
            let mut taken = 0;
            while let Some(entry) = next.take() {
                taken += 1;
                line.clear();
                format_line(&entry, self.format, &mut line);
                match self.sink.writer().write_all(&line) {
                    Ok(()) => self.stats.lines.fetch_add(1, Ordering::Relaxed),
                    Err(_) => self.stats.write_errors.fetch_add(1, Ordering::Relaxed),
                };
                self.keep_recent(entry);
                next = self.lines.try_recv().ok();
            }
            if self.sink.writer().flush().is_err() {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            }
            self.stats.handled.fetch_add(taken, Ordering::Release);
        }
        let _ = self.sink.writer().flush();
    }

    fn keep_recent(&self, entry: Entry) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(entry);
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

/// `entry` as one line (with its newline) in `format`.
pub fn format_line(entry: &Entry, format: Format, out: &mut Vec<u8>) {
    match format {
        Format::Json => {
            serde_json::to_writer(&mut *out, entry).expect("entries serialise");
        }
        Format::Text => {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let filters = if entry.filters.is_empty() {
                "-".to_string()
            } else {
                entry
                    .filters
                    .iter()
                    .map(|f| format!("{}:{:.3}", f.name, f.ms))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let _ = write!(
                out,
                "{} [{}] \"{} {}{} {}\" {} {} in={} ms={:.3} route={} upstream={} upstream_ms={} filters={} local={} error={} id={} trace={}",
                entry.client.map_or("-".to_string(), |c| c.to_string()),
                format_time(entry.time.unwrap_or(SystemTime::UNIX_EPOCH)),
                entry.method,
                entry.host,
                entry.path,
                entry.protocol,
                entry.status,
                entry.bytes_out,
                entry.bytes_in,
                entry.duration_ms,
                if entry.route.is_empty() { "-" } else { &entry.route },
                dash(&entry.upstream),
                entry.upstream_ms.map_or("-".to_string(), |ms| format!("{ms:.3}")),
                filters,
                dash(&entry.local_response),
                dash(&entry.error),
                entry.request_id,
                dash(&entry.trace_id),
            );
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_120)),
            request_id: 7,
            client: Some("127.0.0.1:5000".parse().unwrap()),
            method: "GET".into(),
            host: "shop.example".into(),
            path: "/a?b=1".into(),
            protocol: "HTTP/1.1",
            status: 200,
            bytes_out: 12,
            duration_ms: 1.5,
            route: "api".into(),
            upstream: Some("127.0.0.1:9000".into()),
            upstream_ms: Some(1.25),
            filters: vec![FilterTime {
                name: "auth".into(),
                ms: 0.25,
            }],
            ..Entry::default()
        }
    }

    #[test]
    fn json_lines_have_the_fixed_fields() {
        let mut line = Vec::new();
        format_line(&entry(), Format::Json, &mut line);
        assert_eq!(line.last(), Some(&b'\n'));
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["time"], "2023-11-14T22:13:20.120Z");
        assert_eq!(value["route"], "api");
        assert_eq!(value["filters"][0]["name"], "auth");
        assert_eq!(value["upstream_ms"], 1.25);
        assert!(value["local_response"].is_null());
    }

    #[test]
    fn text_lines_name_their_fields() {
        let mut line = Vec::new();
        format_line(&entry(), Format::Text, &mut line);
        let line = String::from_utf8(line).unwrap();
        assert!(line.starts_with(
            "127.0.0.1:5000 [2023-11-14T22:13:20.120Z] \"GET shop.example/a?b=1 HTTP/1.1\" 200 12 in=0 ms=1.500 route=api upstream=127.0.0.1:9000"
        ), "{line}");
        assert!(
            line.contains(" filters=auth:0.250 local=- error=- id=7 trace=-\n"),
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
        assert_eq!(log.recent(|e| e.route == "api", 10).len(), 2);
        // Drained: nothing queued is left unwritten.
        log.record(entry());
        assert!(log.drain(Duration::from_secs(10)));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        assert!(log.recent(|e| e.status == 500, 10).is_empty());
    }
}
