//! A `wasmgate run` process on a YAML configuration written by the test.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use super::{free_port, plugin, wasmgate, HttpClient, Reply};

pub struct GatewayProc {
    pub child: Child,
    pub port: u16,
    pub admin_port: u16,
    /// The port of `{tls_listen}` (for a TLS listener), free whether used or not.
    pub tls_port: u16,
    _dir: tempfile::TempDir,
    pub config: PathBuf,
    /// Everything the gateway wrote to stderr so far. It is read as it
    /// comes: a pipe nobody reads fills up and blocks the gateway's logging.
    logs: Arc<Mutex<String>>,
}

/// `{wasm:name}` in the YAML becomes the path of plugin `name`;
/// `{listen}` and `{admin}` become free addresses (a `GatewayProc` also
/// replaces `{tls_listen}`).
pub fn render(yaml: &str, port: u16, admin_port: u16) -> String {
    let mut text = yaml
        .replace("{listen}", &format!("127.0.0.1:{port}"))
        .replace("{admin}", &format!("127.0.0.1:{admin_port}"));
    while let Some(start) = text.find("{wasm:") {
        let end = start + text[start..].find('}').unwrap();
        let name = &text[start + 6..end];
        let path = plugin(name).display().to_string();
        text.replace_range(start..=end, &path);
    }
    text
}

impl GatewayProc {
    pub fn start(yaml: &str) -> GatewayProc {
        GatewayProc::start_with(yaml, &[])
    }

    /// Starts `wasmgate run` with extra arguments.
    pub fn start_with(yaml: &str, args: &[&str]) -> GatewayProc {
        GatewayProc::start_with_env(yaml, args, &[])
    }

    /// Starts `wasmgate run` with variables added to its environment (the
    /// tests share one process, so they never change their own).
    pub fn start_with_env(yaml: &str, args: &[&str], env: &[(&str, &str)]) -> GatewayProc {
        let mut gateway = GatewayProc::start_compiling(yaml, args, env);
        if yaml.contains("{admin}") {
            gateway.until_components_compiled();
        }
        gateway
    }

    /// Waits while `/readyz` says a component is still compiling
    /// (docs/gateway.md, "Components that compile in the background"), as
    /// an orchestrator would: a test of what a component answers must not
    /// meet 503 `plugin_starting` on a busy machine.
    fn until_components_compiled(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return; // it stopped: the test says why
            }
            // Nothing yet: the admin listener is bound after the traffic
            // listeners.
            let answer = raw_get(self.admin_port, "/readyz");
            if !answer.is_empty() && !answer.contains("still compiling") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "a component was still compiling after 300 s: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `wasmgate run` and returns once it listens, whether or not
    /// its components have compiled.
    pub fn start_compiling(yaml: &str, args: &[&str], env: &[(&str, &str)]) -> GatewayProc {
        let (port, admin_port, tls_port) = (free_port(), free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("wasmgate.yaml");
        let yaml = yaml.replace("{tls_listen}", &format!("127.0.0.1:{tls_port}"));
        std::fs::write(&config, render(&yaml, port, admin_port)).unwrap();
        let mut child = wasmgate()
            .args(["run", "-c"])
            .arg(&config)
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting wasmgate run");
        let logs = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        let drain = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut logs = sink.lock().unwrap();
                logs.push_str(&line);
                logs.push('\n');
            }
        });
        let mut gateway = GatewayProc {
            child,
            port,
            admin_port,
            tls_port,
            _dir: dir,
            config,
            logs,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = gateway.child.try_wait().unwrap() {
                let _ = drain.join();
                panic!("wasmgate run exited with {status}: {}", gateway.logs());
            }
            assert!(
                Instant::now() < deadline,
                "wasmgate run did not start listening within 180 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        gateway
    }

    /// What the gateway has logged so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// What the gateway has logged, once every one of `wanted` is in it
    /// (a line about a request may come a moment after its answer); panics
    /// after 10 s.
    pub fn logs_with(&self, wanted: &[&str]) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let logged = self.logs();
            if wanted.iter().all(|w| logged.contains(w)) {
                return logged;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the log never had all of {wanted:?}:\n{logged}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The directory holding the configuration file.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// Replaces the configuration file (same ports), atomically as editors
    /// and deploy tools do: written beside it, then renamed over it.
    pub fn rewrite(&self, yaml: &str) {
        let staged = self.config.with_extension("yaml.new");
        let yaml = yaml.replace("{tls_listen}", &format!("127.0.0.1:{}", self.tls_port));
        std::fs::write(&staged, render(&yaml, self.port, self.admin_port)).unwrap();
        std::fs::rename(&staged, &self.config).unwrap();
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// Stops it as an operator or an orchestrator does (SIGTERM) and waits
    /// for it to exit; its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(signalled.success());
        self.child.wait().unwrap()
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        // A failing test shows what the gateway logged.
        if std::thread::panicking() {
            eprintln!(
                "--- wasmgate run log ---\n{}--- end of log ---",
                self.logs()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The set-up most gateway tests share: one echoing upstream
/// (`common::upstream`) called `name`, and a gateway on `yaml`, in which
/// `{backend}` is that upstream's address (besides `{listen}`, `{admin}`
/// and `{wasm:NAME}`, as for [`GatewayProc::start`]).
pub async fn with_upstream(name: &str, yaml: &str) -> (super::upstream::Upstream, GatewayProc) {
    let upstream = super::upstream::Upstream::start(name).await;
    let gateway = GatewayProc::start(&yaml.replace("{backend}", &upstream.address()));
    (upstream, gateway)
}

/// Sends a request with `headers` and `body`.
pub async fn send(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let mut request = hyper::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request.body(Full::new(body.into())).unwrap();
    let response = client.request(request).await.expect("request failed");
    Reply::read(response).await
}

pub async fn get(client: &HttpClient, url: &str) -> Reply {
    send(client, "GET", url, &[], Bytes::new()).await
}

/// An admin API call as a script makes it (marked deliberate with
/// `X-Wasmgate-Admin`, no token: the tests' admin listeners are on loopback).
pub async fn admin(
    c: &HttpClient,
    gw: &GatewayProc,
    method: &str,
    path: &str,
    body: &str,
) -> Reply {
    send(
        c,
        method,
        &gw.admin_url(path),
        &[("x-wasmgate-admin", "1")],
        body.to_string(),
    )
    .await
}

/// A sample of the gateway's `/metrics`, with its labels as written.
pub async fn metric(c: &HttpClient, gw: &GatewayProc, series: &str) -> f64 {
    let text = send(c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{series}` in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

/// Waits (10 s at most) until `series` of the gateway's `/metrics` has a
/// value `wanted` accepts, and returns it.
pub async fn until_metric(
    c: &HttpClient,
    gw: &GatewayProc,
    series: &str,
    wanted: impl Fn(f64) -> bool,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = metric(c, gw, series).await;
        if wanted(value) {
            return value;
        }
        assert!(Instant::now() < deadline, "`{series}` stayed at {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the number in header `name` of the answers to `GET url` has
/// grown by `by` from its first value, and returns how far it went; panics
/// if it has not within `within`. For counts a plugin keeps on its own (a
/// root context's ticks): the wait ends as soon as they have moved.
pub async fn until_header_grows(
    c: &HttpClient,
    url: &str,
    name: &str,
    by: u64,
    within: Duration,
) -> (u64, u64) {
    let started = Instant::now();
    let first = get(c, url).await.number(name);
    loop {
        let now = get(c, url).await.number(name);
        if now >= first + by {
            return (first, now);
        }
        assert!(
            started.elapsed() < within,
            "{name} went from {first} to {now} in {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the gateway has applied configuration generation `n`.
pub async fn until_generation(c: &HttpClient, gw: &GatewayProc, n: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = send(c, "GET", &gw.admin_url("/status"), &[], "")
            .await
            .json();
        if status["reload"]["generation"].as_u64() >= Some(n) {
            return status;
        }
        assert!(Instant::now() < deadline, "no generation {n}: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The whole answer (head and body) to a plain `GET path` on 127.0.0.1:port,
/// or "" if the connection fails: for waits outside an async runtime.
fn raw_get(port: u16, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let answer = super::raw_exchange(port, request.as_bytes(), Duration::from_secs(5));
    String::from_utf8_lossy(&answer.unwrap_or_default()).into_owned()
}

/// A filter that traps on `/crash` (in a function of its own, which a
/// backtrace names) and otherwise adds `x-fragile: ok`.
pub const FRAGILE: &str = r#"(module
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) ":path")
  (data (i32.const 16) "x-fragile")
  (data (i32.const 32) "ok")
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param i32) (result i32)
    (local $p i32) (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 0))) (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $get (i32.const 0) (i32.const 0) (i32.const 5) (i32.const 64) (i32.const 68)))
    ;; "/crash" is 6 bytes starting with "/c"
    (if (i32.and (i32.eq (i32.load (i32.const 68)) (i32.const 6))
                 (i32.eq (i32.load8_u (i32.add (i32.load (i32.const 64)) (i32.const 1))) (i32.const 99)))
      (then (call $explode_on_purpose)))
    (drop (call $add (i32.const 0) (i32.const 16) (i32.const 9) (i32.const 32) (i32.const 2)))
    (i32.const 0))
  (func $explode_on_purpose unreachable)
)"#;
