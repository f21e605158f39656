//! The access log's own tests: lines in both formats, a reopen after a
//! rename, a stalled sink that costs lines but never a request's time, and
//! the dashboard's list of recent requests.

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

/// A sink that stops taking bytes (a pipe nobody reads: a disk that
/// hangs) stalls the writer, never a request: `record` goes on
/// returning, and what the full buffer cannot take is counted.
#[test]
fn a_stalled_sink_drops_and_counts_lines_and_never_blocks_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("stalled");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // The reader opens the pipe (so the log's open returns) and never reads.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || File::open(fifo).unwrap())
    };
    let log = AccessLog::start(Target::File(fifo), Format::Json).unwrap();
    let _held = reader.join().unwrap();
    // A pipe takes 64 KiB, a thread's buffer 4 MiB: some 15,000 lines
    // in all. Sent: three times that.
    let sent = 45_000u64;
    let started = std::time::Instant::now();
    for id in 0..sent {
        log.record(Entry {
            request_id: id,
            ..entry()
        });
    }
    let took = started.elapsed();
    let dropped = log.stats().dropped.load(Ordering::Relaxed);
    assert!(dropped > 0, "nothing dropped");
    let recorded: u64 = lock(&log.shared.buffers)
        .iter()
        .map(|lines| lock(lines).recorded)
        .sum();
    assert_eq!(recorded + dropped, sent);
    // Not a timing claim about speed: a request that waited on the
    // stalled writer would wait forever.
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(!log.drain(Duration::from_millis(50)));
}

/// Two threads' lines, the later requests' taken by the writer first
/// (in an earlier round), and request ids that do not follow arrival
/// (they are counted per thread): the dashboard's list is still newest
/// first, by arrival.
#[test]
fn the_dashboards_list_orders_the_threads_lines_by_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let log =
        Arc::new(AccessLog::start(Target::File(dir.path().join("a.log")), Format::Json).unwrap());
    let base = Instant::now();
    // Request n came in n ms after `base`; its id is 100 - n.
    let record = |arrivals: [u64; 2]| {
        let log = log.clone();
        std::thread::spawn(move || {
            for n in arrivals {
                log.record(Entry {
                    request_id: 100 - n,
                    began: Some(base + Duration::from_millis(n)),
                    ..entry()
                });
            }
        })
        .join()
        .unwrap()
    };
    record([3, 4]);
    assert!(log.drain(Duration::from_secs(10)));
    record([1, 2]);
    assert!(log.drain(Duration::from_secs(10)));
    let ids: Vec<u64> = log
        .recent(|_, _| true, 10)
        .iter()
        .map(|e| e["request_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [96, 97, 98, 99]);
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
