//! R6 of the reliability suite (issue 4): a long-running property test that
//! drives every function of `extism:host/env` (the host's and the kernel's)
//! with hostile handles, offsets, lengths and sequences, and checks that the
//! host never panics, that every failure is a clean error of the function
//! that refused the call, that a failed instance is replaced, and that
//! well-formed calls through the same plugin still work after each batch.
//!
//! The guest is the script guest of `common/script_guest.rs`, generated from
//! its table of host functions: it imports every function and interprets the
//! script it gets as input, which it copies into its own linear memory first
//! (no Extism function can write there, so no hostile call can change the
//! script). Each call under test is reported, before and after, through a
//! host function of the test's own (`extism:host/user::fuzz_report`), so a
//! call that fails its plugin call is known by name. Outbound HTTP goes to a small server in the
//! test that answers well, badly, slowly or not at all.
//!
//! `WASMGATE_FUZZ_ITERS` (plugin calls, default 40000), `WASMGATE_FUZZ_SEED`
//! (default fixed) and `WASMGATE_FUZZ_SECS` (optional time cap) steer it;
//! `reliability/r6_fuzz.sh` runs it for minutes. The summary is printed with
//! `--nocapture`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::script_guest::P::*;
use crate::common::script_guest::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmgate_extism::{CallError, Manifest, Plugin, PluginOptions, Runtime, RuntimeConfig};
use wasmgate_testkit::fuzz::{env_u64, LogSink};

/// What a function may fail with: the start of the message of each clean
/// error it has. Functions not listed never fail.
fn allowed_failures(name: &str) -> &'static [&'static str] {
    const NO_MEMORY: &str = "unable to allocate memory";
    // Utf8Error's messages: "invalid utf-8 sequence of 1 bytes from index
    // 0", "incomplete utf-8 byte sequence from index 0".
    const NOT_UTF8: &str = " utf-8 ";
    match name {
        "config_get" => &["invalid handle offset for config key", NOT_UTF8, NO_MEMORY],
        "var_get" => &["invalid handle offset for var key", NOT_UTF8, NO_MEMORY],
        "var_set" => &[
            "Vars are disabled by this host",
            "invalid handle offset for var key",
            "invalid handle offset for var value",
            NOT_UTF8,
            "Variable store is full",
        ],
        "http_request" => &[
            "invalid handle offset for http request",
            "invalid http request JSON",
            "HTTP request to",
            "Invalid URL",
            "HTTP response exceeds the configured maximum",
            NO_MEMORY,
        ],
        "http_headers" => &[NO_MEMORY],
        "log_trace" | "log_debug" | "log_info" | "log_warn" | "log_error" => {
            &["invalid handle offset for log message"]
        }
        // The memory functions never fail: out of range is 0 or ignored.
        _ => &[],
    }
}

/// Offsets and lengths on the edges of Extism memory (blocks start at 64),
/// of wasm32 and of u64.
fn edge(rng: &mut Rng) -> u64 {
    let choices = [
        0,
        1,
        7,
        8,
        63,
        64,
        65,
        72,
        0xffff,
        0x1_0000,
        0x1_0001,
        (4 << 20) - 1,
        4 << 20,
        1 << 30,
        3 << 30,
        (1 << 32) - 128,
        (1 << 32) - 1,
        1 << 32,
        (1 << 32) + 64,
        1 << 40,
        i64::MAX as u64,
        1 << 63,
        u64::MAX,
        u64::MAX - 7,
        u64::MAX - 63,
        rng.next_u64(),
    ];
    rng.pick(&choices)
}

fn fuzz_data(port: u16, rng: &mut Rng) -> Data {
    let mut d = Data {
        bytes: Vec::new(),
        entries: BTreeMap::new(),
    };
    for key in [
        &b"greeting"[..],
        b"empty",
        b"missing",
        b"v1",
        b"v2",
        b"",
        b"\xff\xfe not utf-8",
        &[b'k'; 300],
    ] {
        d.add("key", key);
    }
    for message in [&b"a log line"[..], b"", b"\x00\xff\xfe", &[b'm'; 2000]] {
        d.add("text", message);
    }
    let local = format!("http://127.0.0.1:{port}");
    let long_url = format!(r#"{{"url":"{local}/ok?{}"}}"#, "q".repeat(10_000));
    for json in [
        format!(r#"{{"url":"{local}/ok"}}"#),
        format!(r#"{{"url":"{local}/ok","method":"POST","headers":{{"x-a":"b"}}}}"#),
        format!(r#"{{"url":"{local}/ok","method":"head"}}"#),
        format!(r#"{{"url":"{local}/big"}}"#),
        format!(r#"{{"url":"{local}/garbage"}}"#),
        format!(r#"{{"url":"{local}/close"}}"#),
        format!(r#"{{"url":"{local}/slow"}}"#),
        format!(r#"{{"url":"{local}/status/503"}}"#),
        format!(r#"{{"url":"{local}/ok","method":"BAD METHOD"}}"#),
        format!(r#"{{"url":"{local}/ok","method":""}}"#),
        format!(r#"{{"url":"{local}/ok","method":"CONNECT"}}"#),
        format!(r#"{{"url":"{local}/ok","headers":{{"bad name":"x"}}}}"#),
        format!(r#"{{"url":"{local}/ok","headers":{{"x":"a\nb"}}}}"#),
        format!(r#"{{"url":"http://user:pw@127.0.0.1:{port}/ok"}}"#),
        r#"{"url":"http://127.0.0.1:1/refused"}"#.to_string(),
        r#"{"url":"http://example.com/"}"#.to_string(),
        r#"{"url":"not a url"}"#.to_string(),
        r#"{"url":"file:///etc/passwd"}"#.to_string(),
        r#"{"url":"ftp://127.0.0.1/x"}"#.to_string(),
        r#"{"url":"http://[::1"}"#.to_string(),
        r#"{"url":7}"#.to_string(),
        "{".to_string(),
        "[]".to_string(),
        String::new(),
        long_url,
    ] {
        d.add("json", json.as_bytes());
    }
    let random = rng.bytes(256);
    d.add("random", &random);
    d
}

/// Registers 0..6 hold blocks the script made; the rest, call results.
const BLOCK_REGS: u32 = 6;

struct Generator<'a> {
    rng: &'a mut Rng,
    data: &'a Data,
    hostile: u32,
    /// What kind of bytes each block register holds ("" once freed).
    kinds: [&'static str; BLOCK_REGS as usize],
    /// Blocks to make before the op being generated.
    pending: Vec<Op>,
}

/// Functions that take (and free) the blocks they are given.
fn consumes(name: &str) -> bool {
    matches!(
        name,
        "config_get" | "var_get" | "var_set" | "http_request" | "free"
    ) || name.starts_with("log_")
}

/// The kind of block a function's handle parameter wants.
fn wants(name: &str) -> Option<&'static str> {
    match name {
        "config_get" | "var_get" | "var_set" => Some("key"),
        "http_request" => Some("json"),
        n if n.starts_with("log_") => Some("text"),
        _ => None,
    }
}

impl Generator<'_> {
    fn new_block(&mut self, kind: &'static str, dest: u32) -> Op {
        self.kinds[dest as usize] = kind;
        let (offset, len) = self.rng.pick(&self.data.entries[kind]);
        Op {
            f: NEW_BLOCK,
            dest,
            a: lit(u64::from(offset)),
            b: lit(u64::from(len)),
        }
    }

    /// A register holding a live block of `kind` (made now if none does).
    fn block_of(&mut self, kind: Option<&'static str>) -> u32 {
        let matching: Vec<u32> = (0..BLOCK_REGS)
            .filter(|r| match kind {
                Some(kind) => self.kinds[*r as usize] == kind,
                None => !self.kinds[*r as usize].is_empty(),
            })
            .collect();
        if !matching.is_empty() && self.rng.chance(90) {
            return self.rng.pick(&matching);
        }
        let r = self.rng.below(BLOCK_REGS);
        let kind = kind.unwrap_or_else(|| self.rng.pick(&["key", "text", "json", "random"]));
        let op = self.new_block(kind, r);
        self.pending.push(op);
        r
    }

    fn arg(&mut self, p: P, wanted: Option<&'static str>) -> Arg {
        let valid = !self.rng.chance(self.hostile);
        if p == Handle && valid && self.rng.chance(85) {
            // A block the script made.
            let r = self.block_of(wanted);
            return reg(r, 0);
        }
        let rng = &mut *self.rng;
        match p {
            Handle if valid => match rng.below(10) {
                // A block or value a call returned.
                0..=6 => reg(rng.below(16), 0),
                // Into the middle of a block, or at its end.
                7 => reg(rng.below(16), u64::from(rng.below(16))),
                8 => lit(64),
                _ => lit(0),
            },
            Handle => match rng.below(3) {
                0 => reg(rng.below(16), rng.pick(&[u64::MAX, 1 << 32, 4096, 1, 8])),
                _ => lit(edge(rng)),
            },
            Len if valid => match rng.below(10) {
                0..=2 => reg(rng.below(16), 0),
                3 => lit(rng.pick(&[100, 1000, 65536])),
                _ => lit(rng.pick(&[0, 1, 2, 8])),
            },
            Len | InputAt if !valid => lit(edge(rng)),
            InputAt => lit(u64::from(rng.below(64))),
            Byte => lit(u64::from(rng.below(256))),
            Word => lit(rng.next_u64()),
            _ => lit(edge(rng)),
        }
    }

    fn script(&mut self, max_ops: u32) -> Script {
        self.hostile = self.rng.pick(&[0, 2, 5, 10, 25, 50]);
        self.kinds = [""; BLOCK_REGS as usize];
        let mut ops = Vec::new();
        for dest in 0..BLOCK_REGS {
            let kind = self.rng.pick(&["key", "key", "text", "json", "random"]);
            ops.push(self.new_block(kind, dest));
        }
        for _ in 0..self.rng.below(max_ops + 1) {
            // Calls that take a block free it: make new ones now and then.
            if self.rng.chance(20) {
                let kind = self.rng.pick(&["key", "text", "json", "json"]);
                let dest = self.rng.below(BLOCK_REGS);
                ops.push(self.new_block(kind, dest));
                continue;
            }
            let f = self.rng.below(HOST_FUNCTIONS.len() as u32);
            let h = &HOST_FUNCTIONS[f as usize];
            let wanted = wants(h.name);
            let a = h
                .params
                .first()
                .map_or(Arg::default(), |p| self.arg(*p, wanted));
            let b = match h.params.get(1) {
                // A request body: mostly none.
                Some(_) if h.name == "http_request" && self.rng.chance(60) => lit(0),
                // A var's value: any block.
                Some(p) if h.name == "var_set" => self.arg(*p, None),
                Some(p) => self.arg(*p, wanted),
                None => Arg::default(),
            };
            let dest = BLOCK_REGS + self.rng.below(16 - BLOCK_REGS);
            ops.append(&mut self.pending);
            ops.push(Op { f, dest, a, b });
            // Track what the call freed.
            if h.name == "reset" {
                self.kinds = [""; BLOCK_REGS as usize];
            }
            if consumes(h.name) {
                for arg in [a, b] {
                    if arg.mode == 1 && arg.reg < BLOCK_REGS && arg.value == 0 {
                        self.kinds[arg.reg as usize] = "";
                    }
                }
            }
        }
        let code = match self.rng.below(10) {
            0 => 1,
            1 => -1,
            _ => 0,
        };
        Script { ops, code }
    }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    calls: u64,
    returned: u64,
    failed: u64,
}

#[derive(Default)]
struct Tally {
    per_function: Vec<Counts>,
    outcomes: BTreeMap<&'static str, u64>,
    failures: BTreeMap<String, u64>,
    calls: u64,
    probes: u64,
}

impl Tally {
    fn executions(&self) -> u64 {
        self.per_function.iter().map(|c| c.calls).sum()
    }

    /// Counts one plugin call's host calls and checks how it ended; true if
    /// a host call failed it (and so its instance must be gone).
    fn account(
        &mut self,
        reports: &[Report],
        result: &Result<Vec<u8>, CallError>,
        code: i32,
    ) -> bool {
        let mut started: BTreeMap<u64, (u64, bool, i64)> = BTreeMap::new();
        for r in reports.iter().filter(|r| r.is_call()) {
            assert!((r.f as usize) < HOST_FUNCTIONS.len(), "{r:?}");
            let entry = started.entry(r.seq).or_insert((r.f, false, 0));
            assert_eq!(entry.0, r.f, "two functions under one sequence number");
            if r.finished() {
                entry.1 = true;
                entry.2 = r.result;
            }
        }
        let unfinished: Vec<u64> = started
            .iter()
            .filter(|(_, (_, finished, _))| !finished)
            .map(|(seq, _)| *seq)
            .collect();
        assert!(unfinished.len() <= 1, "several calls never returned");
        for (seq, (f, finished, value)) in &started {
            let h = &HOST_FUNCTIONS[*f as usize];
            let c = &mut self.per_function[*f as usize];
            c.calls += 1;
            if *finished {
                c.returned += 1;
                check_result(h.name, *value);
            } else {
                c.failed += 1;
                assert_eq!(
                    Some(seq),
                    started.keys().last(),
                    "calls ran after a failure"
                );
            }
        }
        let failing = unfinished.first().map(|seq| started[seq].0);
        let outcome = match (result, failing) {
            (Err(CallError::Crash(report)), Some(f)) => {
                let name = HOST_FUNCTIONS[f as usize].name;
                assert_eq!(report.function, "run");
                assert_eq!(report.kind.as_str(), "host_error", "{name}: {report}");
                let class = allowed_failures(name)
                    .iter()
                    .find(|prefix| report.message.contains(*prefix))
                    .unwrap_or_else(|| {
                        panic!("{name} failed with an unexpected error: {}", report.message)
                    });
                let class = if class.starts_with(name) {
                    class.to_string()
                } else {
                    format!("{name}: {class}")
                };
                *self.failures.entry(class).or_default() += 1;
                "failed cleanly (instance replaced)"
            }
            // As in the reference runtime, an error the plugin set wins over
            // the failure that ended its call (the instance is still dropped).
            (Err(CallError::Plugin(_)), Some(_))
                if reports
                    .iter()
                    .any(|r| r.finished() && r.f == u64::from(host_fn("error_set"))) =>
            {
                "failed, reported as the error the plugin had set"
            }
            (Err(CallError::Crash(report)), None) => {
                panic!("the call failed with no host call in flight: {report}")
            }
            (_, Some(f)) => panic!(
                "{} never returned, yet the call ended with {result:?}",
                HOST_FUNCTIONS[f as usize].name
            ),
            (Ok(_), None) => "returned output",
            (Err(CallError::Plugin(_)), None) => "plugin error (error_set)",
            (Err(CallError::NonZeroExit(c)), None) => {
                assert_eq!(*c, code, "exit code");
                "non-zero exit"
            }
            (Err(other), None) => panic!("unexpected call error: {other}"),
        };
        *self.outcomes.entry(outcome).or_default() += 1;
        failing.is_some()
    }
}

/// Invariants of results.
fn check_result(name: &str, value: i64) {
    match name {
        "alloc" => assert!(value == 0 || value >= 64, "alloc returned {value}"),
        "memory_bytes" => assert!(value >= 64, "memory_bytes returned {value}"),
        "length" | "length_unsafe" | "input_length" | "output_length" => {
            assert!((0..1 << 33).contains(&value), "{name} returned {value}")
        }
        "http_status_code" => assert!(
            value == 0 || (100..=599).contains(&value),
            "http_status_code returned {value}"
        ),
        "get_log_level" => assert!(
            (0..=4).contains(&value) || value == i64::from(i32::MAX),
            "get_log_level returned {value}"
        ),
        "load_u8" | "input_load_u8" => assert!((0..=255).contains(&value), "{name}: {value}"),
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// The embedder side: an HTTP server for `http_request`, and a log sink.

/// Answers by path: `/ok`, `/big` (200 kB), `/garbage` (not HTTP), `/close`
/// (hangs up), `/slow` (10 ms), `/status/503`.
async fn serve_http(listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            let read = tokio::time::timeout(Duration::from_secs(2), async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            })
            .await;
            if read != Ok(true) {
                return;
            }
            let line = String::from_utf8_lossy(&head);
            let path = line.split(' ').nth(1).unwrap_or("/");
            let response: Vec<u8> = if path.starts_with("/big") {
                let body = vec![b'b'; 200_000];
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                r.extend_from_slice(&body);
                r
            } else if path.starts_with("/garbage") {
                b"NOT HTTP AT ALL\r\n\r\n".to_vec()
            } else if path.starts_with("/close") {
                return;
            } else if path.starts_with("/status/503") {
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy"
                    .to_vec()
            } else {
                if path.starts_with("/slow") {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nx-test: yes\r\nx-bin: \xff\r\nconnection: close\r\n\r\npong"
                    .to_vec()
            };
            let _ = socket.write_all(&response).await;
            let _ = socket.shutdown().await;
        });
    }
}

// ---------------------------------------------------------------------------
// Plugins and probes.

const PROBE_VALUE: &[u8] = b"the probe's value";

/// One plugin under test, with what its probes expect.
struct Target {
    plugin: Plugin,
    name: &'static str,
    vars: bool,
    probe_key: String,
}

fn make_plugin(
    runtime: &Runtime,
    wasm_path: &std::path::Path,
    manifest: &str,
    name: &'static str,
    reports: &Reports,
) -> Plugin {
    let mut manifest = Manifest::from_json(manifest).unwrap();
    manifest.wasm = Manifest::from_wasm_file(wasm_path).wasm;
    Plugin::new(
        runtime,
        &manifest,
        PluginOptions {
            name: Some(name.into()),
            host_functions: vec![report_function(reports.clone())],
            ..PluginOptions::default()
        },
    )
    .unwrap()
}

impl Target {
    /// Well-formed calls whose outputs are checked: an echo of a block, a
    /// config value, the var the first probe set, and the input itself.
    async fn probe(&self, reports: &Reports, tally: &mut Tally, first: bool, rng: &mut Rng) {
        let token = format!("token-{:016x}", rng.next_u64());
        let key = self.probe_key.as_bytes();
        let output = |block: u32| {
            vec![
                call_op("length", 10, reg(block, 0), lit(0)),
                call_op("output_set", 11, reg(block, 0), reg(10, 0)),
            ]
        };
        let mut checks: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (
                probe_script(&[token.as_bytes()], output(0)),
                token.clone().into_bytes(),
            ),
            (
                probe_script(&[b"greeting"], {
                    let mut ops = vec![call_op("config_get", 1, reg(0, 0), lit(0))];
                    ops.extend(output(1));
                    ops
                }),
                b"hello from the manifest".to_vec(),
            ),
        ];
        if self.vars {
            if first {
                let set = probe_script(
                    &[key, PROBE_VALUE],
                    vec![call_op("var_set", 12, reg(0, 0), reg(1, 0))],
                );
                checks.push((set, Vec::new()));
            }
            let get = probe_script(&[key], {
                let mut ops = vec![call_op("var_get", 2, reg(0, 0), lit(0))];
                ops.extend(output(2));
                ops
            });
            checks.push((get, PROBE_VALUE.to_vec()));
        }
        let echo = probe_script(
            &[],
            vec![
                call_op("input_offset", 3, lit(0), lit(0)),
                call_op("input_length", 4, lit(0), lit(0)),
                call_op("output_set", 5, reg(3, 0), reg(4, 0)),
            ],
        );
        checks.push((echo.clone(), echo));
        for (input, expected) in checks {
            reports.lock().unwrap().clear();
            let output = tokio::time::timeout(HANG, self.plugin.call("run", &input))
                .await
                .expect("the probe hung")
                .unwrap_or_else(|e| panic!("{}: the probe failed: {e}", self.name));
            assert_eq!(output, expected, "{}: probe output", self.name);
            let mut reports = std::mem::take(&mut *reports.lock().unwrap());
            reports.retain(Report::is_call);
            assert!(reports.iter().any(|r| r.finished()));
            assert!(
                reports
                    .chunks(2)
                    .all(|pair| pair.len() == 2 && pair[1].finished()),
                "{}: a probe call did not return: {reports:?}",
                self.name
            );
        }
        tally.probes += 1;
    }
}

const DEFAULT_SEED: u64 = 0x5eed_0006;
const BATCH: u64 = 100;
const MAX_OPS: u32 = 24;
const HANG: Duration = Duration::from_secs(30);

#[test]
fn the_table_names_every_host_function() {
    let mut table: Vec<&str> = HOST_FUNCTIONS.iter().map(|h| h.name).collect();
    let mut host: Vec<&str> = wasmgate_extism::host_env::FUNCTIONS.to_vec();
    table.sort_unstable();
    host.sort_unstable();
    assert_eq!(table, host);
}

#[tokio::test(flavor = "current_thread")]
async fn every_host_function_survives_hostile_calls() {
    let _ = tracing::subscriber::set_global_default(LogSink);
    let seed = env_u64("WASMGATE_FUZZ_SEED", DEFAULT_SEED);
    let iterations = env_u64("WASMGATE_FUZZ_ITERS", 40_000);
    let time_cap = std::env::var("WASMGATE_FUZZ_SECS")
        .ok()
        .map(|s| Duration::from_secs_f64(s.trim().parse().expect("WASMGATE_FUZZ_SECS")));
    let mut rng = Rng(seed);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve_http(listener));

    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wasm_path = dir.path().join("fuzz.wat");
    std::fs::write(&wasm_path, guest_wat()).unwrap();
    let reports: Reports = Arc::default();
    let config = r#""config":{"greeting":"hello from the manifest","empty":"","v1":"x"}"#;
    // A: capped memory (4 MiB of Extism memory), vars, local HTTP allowed.
    // B: a 64 MiB cap, vars disabled, tiny HTTP responses, any host. (Without
    // a cap Extism memory may hold 4 GiB, as documented, and the host copies
    // what a call outputs or logs: a fuzzer that asks for that all the time
    // only measures memcpy; the 4 GiB edge has its own test below.)
    let targets = [
        Target {
            plugin: make_plugin(
                &runtime,
                &wasm_path,
                &format!(
                    r#"{{{config},"memory":{{"max_pages":64,"max_var_bytes":65536}},"allowed_hosts":["127.0.0.1"],"timeout_ms":10000}}"#
                ),
                "fuzz-capped",
                &reports,
            ),
            name: "fuzz-capped",
            vars: true,
            probe_key: format!("probe-key-{:x}", rng.next_u64()),
        },
        Target {
            plugin: make_plugin(
                &runtime,
                &wasm_path,
                &format!(
                    r#"{{{config},"memory":{{"max_pages":1024,"max_var_bytes":0,"max_http_response_bytes":1000}},"allowed_hosts":["*"],"timeout_ms":10000}}"#
                ),
                "fuzz-no-vars",
                &reports,
            ),
            name: "fuzz-no-vars",
            vars: false,
            probe_key: String::new(),
        },
    ];
    let data = fuzz_data(port, &mut rng);
    let mut tally = Tally {
        per_function: vec![Counts::default(); HOST_FUNCTIONS.len()],
        ..Tally::default()
    };
    for target in &targets {
        target.probe(&reports, &mut tally, true, &mut rng).await;
    }

    let started = Instant::now();
    let mut done = 0;
    while done < iterations && time_cap.is_none_or(|cap| started.elapsed() < cap) {
        done += 1;
        let target = &targets[rng.below(2) as usize];
        let mut gen = Generator {
            rng: &mut rng,
            data: &data,
            hostile: 0,
            kinds: [""; BLOCK_REGS as usize],
            pending: Vec::new(),
        };
        let script = gen.script(MAX_OPS);
        let input = script.encode(&data);
        reports.lock().unwrap().clear();
        let before = target.plugin.status().pool;
        let result = tokio::time::timeout(HANG, target.plugin.call("run", &input))
            .await
            .unwrap_or_else(|_| panic!("call {done} hung (seed {seed:#x})"));
        let call_reports = std::mem::take(&mut *reports.lock().unwrap());
        let crashed = tally.account(&call_reports, &result, script.code);
        tally.calls += 1;
        // Only a failed call's instance is dropped; the next call gets a new one.
        let after = target.plugin.status().pool;
        assert_eq!(after.in_use, 0);
        assert_eq!(after.discarded, before.discarded + u64::from(crashed));
        assert_eq!(after.created, before.created + u64::from(before.idle == 0));
        assert_eq!(after.created - after.discarded, after.idle as u64);

        if done % BATCH == 0 {
            for target in &targets {
                target.probe(&reports, &mut tally, false, &mut rng).await;
            }
        }
    }
    for target in &targets {
        target.probe(&reports, &mut tally, false, &mut rng).await;
    }
    let elapsed = started.elapsed();

    let executions = tally.executions();
    let exercised = tally.per_function.iter().filter(|c| c.calls > 0).count();
    println!(
        "extism host functions: seed {seed:#x}, {} plugin calls, {} probe rounds, {executions} hostile calls in {:.1} s",
        tally.calls,
        tally.probes,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<18} {:>9} {:>9} {:>8}",
        "function", "calls", "returned", "failed"
    );
    for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
        println!(
            "{:<18} {:>9} {:>9} {:>8}",
            h.name, c.calls, c.returned, c.failed
        );
    }
    println!("outcomes: {:?}", tally.outcomes);
    println!("clean failures: {:#?}", tally.failures);
    println!("plugin log events formatted: {}", LogSink::events());
    println!(
        "R6 extism: executions={executions} functions={exercised} calls={} seconds={:.1} seed={seed:#x} crashes=0",
        tally.calls,
        elapsed.as_secs_f64()
    );
    if done >= 1000 {
        for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
            assert!(c.calls > 0, "{} was never called", h.name);
            assert!(c.returned > 0, "{} never returned", h.name);
        }
    }
}

/// Extism memory filled to exactly 4 GiB (the cap without `max_pages`): the
/// last bytes are readable and writable; one byte further, loads give 0 and
/// stores and `output_set` are ignored, as in the reference kernel; and no
/// offset wraps around into the kernel's header.
#[tokio::test(flavor = "current_thread")]
async fn extism_memory_ends_exactly_at_4_gib() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wasm_path = dir.path().join("fuzz.wat");
    std::fs::write(&wasm_path, guest_wat()).unwrap();
    let reports: Reports = Arc::default();
    // A new instance for every call: an instance that is reused zeroes the
    // bytes its last call used before it hands them out again (as the
    // reference kernel's reset does), which would touch all 4 GiB.
    let mut manifest = Manifest::from_json("{}").unwrap();
    manifest.wasm = Manifest::from_wasm_file(&wasm_path).wasm;
    let plugin = Plugin::new(
        &runtime,
        &manifest,
        PluginOptions {
            name: Some("fuzz-4gib".into()),
            host_functions: vec![report_function(reports.clone())],
            pool: wasmgate_extism::PoolConfig {
                isolation: true,
                ..Default::default()
            },
            ..PluginOptions::default()
        },
    )
    .unwrap();
    const END: u64 = 1 << 32;
    // Blocks start after the 64-byte header and the input (this script).
    let script = |input_len: u64, last: [Op; 2]| {
        let mut ops = vec![
            call_op("alloc", 6, lit(END - 64 - input_len), lit(0)),
            call_op("store_u64", 7, lit(END - 8), lit(0x1122_3344_5566_7788)),
            call_op("store_u8", 8, lit(END - 1), lit(0x99)),
            call_op("load_u8", 9, lit(END - 1), lit(0)),
            call_op("memory_bytes", 10, lit(0), lit(0)),
            call_op("output_set", 11, lit(END - 8), lit(8)),
        ];
        ops.extend(last);
        probe_script(&[], ops)
    };
    let nothing = call_op("output_length", 12, lit(0), lit(0));
    let input_len = script(0, [nothing; 2]).len() as u64;
    let run = |last: [Op; 2]| {
        let input = script(input_len, last);
        assert_eq!(input.len() as u64, input_len);
        let plugin = &plugin;
        let reports = reports.clone();
        async move {
            reports.lock().unwrap().clear();
            let result = plugin.call("run", &input).await;
            let reports = std::mem::take(&mut *reports.lock().unwrap());
            (result, reports)
        }
    };
    let returned = |reports: &[Report], op: u32| {
        reports
            .iter()
            .filter(|r| r.finished())
            .nth(op as usize)
            .map(|r| r.result)
    };
    let (result, reports) = run([nothing; 2]).await;
    let output = result.unwrap();
    assert_eq!(output, [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x99]);
    assert_eq!(
        returned(&reports, 0),
        Some((64 + input_len) as i64),
        "alloc"
    );
    assert_eq!(returned(&reports, 3), Some(0x99), "load_u8");
    assert_eq!(
        returned(&reports, 4),
        Some((END - 64) as i64),
        "memory_bytes"
    );
    // (the two last ops, which one to check, what it must return)
    for (last, op, expected) in [
        (
            [call_op("load_u64", 12, lit(END - 7), lit(0)), nothing],
            6,
            0,
        ),
        ([call_op("load_u8", 12, lit(END), lit(0)), nothing], 6, 0),
        (
            [
                call_op("store_u8", 12, lit(END), lit(1)),
                call_op("load_u8", 13, lit(END - 1), lit(0)),
            ],
            7,
            0x99,
        ),
        (
            [
                call_op("output_set", 12, lit(END - 8), lit(9)),
                call_op("output_length", 13, lit(0), lit(0)),
            ],
            7,
            8,
        ),
        // 2^32 + 8 would be offset 8 (the header's end of the data region) if
        // it wrapped, and every later load would return 0.
        (
            [
                call_op("store_u64", 12, lit(END + 8), lit(0)),
                call_op("load_u8", 13, lit(END - 1), lit(0)),
            ],
            7,
            0x99,
        ),
        (
            [
                call_op("store_u64", 12, lit(u64::MAX - 7), lit(0)),
                call_op("load_u64", 13, lit(END - 8), lit(0)),
            ],
            7,
            0x9922_3344_5566_7788_u64 as i64,
        ),
    ] {
        let (result, reports) = run(last).await;
        let what = HOST_FUNCTIONS[last[0].f as usize].name;
        assert_eq!(
            result.unwrap(),
            [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x99],
            "{what}"
        );
        assert_eq!(returned(&reports, op), Some(expected), "{what}");
    }
}
