//! Shared helpers: plugin paths, a running `wasmgate serve`, an HTTP client.

#![allow(dead_code)]

pub mod gateway;
pub mod kube;
pub mod peers;
pub mod reference;
pub mod tls;
pub mod upstream;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A guest plugin built by `make plugins` (plugins/build.sh).
pub fn plugin(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make plugins` first",
        path.display()
    );
    // Without `..`: a path a Kubernetes namespace may be granted.
    path.canonicalize().unwrap()
}

pub fn wasmgate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmgate"));
    cmd.env(
        "WASMGATE_CACHE_DIR",
        std::env::temp_dir().join("wasmgate-test-cache"),
    );
    cmd
}

/// What `wasmgate check` says of a configuration it must refuse (`yaml`,
/// written to a file of its own); panics when it accepts it.
pub fn check_refuses(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("refused.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = wasmgate()
        .args(["check", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "check accepted:\n{yaml}\n{stderr}");
    stderr
}

/// A port for a child process to listen on (testkit's policy: below the
/// ephemeral range, handed out once per process, bound-checked now).
pub use wasmgate_testkit::free_port;

/// A `wasmgate serve` process, killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    /// Starts `wasmgate serve <args> --port P` and waits until it accepts connections.
    pub fn start(args: &[&str]) -> Server {
        Server::start_command(wasmgate(), args)
    }

    /// The same, on the CPUs `cpus` only (`taskset -c`), as on a host with
    /// that many CPUs: wasmgate sizes its threads by the CPUs it may use.
    pub fn start_on_cpus(cpus: &str, args: &[&str]) -> Server {
        let plain = wasmgate();
        let mut pinned = Command::new("taskset");
        pinned.args(["-c", cpus]).arg(plain.get_program());
        for (key, value) in plain.get_envs() {
            if let Some(value) = value {
                pinned.env(key, value);
            }
        }
        Server::start_command(pinned, args)
    }

    fn start_command(mut command: Command, args: &[&str]) -> Server {
        let port = free_port();
        let child = command
            .arg("serve")
            .args(args)
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting wasmgate serve");
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = server.child.try_wait().unwrap() {
                let mut stderr = String::new();
                use std::io::Read;
                server
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr)
                    .unwrap();
                panic!("wasmgate serve exited with {status}: {stderr}");
            }
            assert!(
                Instant::now() < deadline,
                "wasmgate serve did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<hyper::HeaderMap>,
}

impl Reply {
    /// Reads the whole response: status, headers, body and trailers.
    pub async fn read(response: hyper::Response<hyper::body::Incoming>) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        Reply {
            status,
            headers,
            body: collected.to_bytes().to_vec(),
            trailers,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The (first) value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Header `name` as a number; panics when it is missing or is not one.
    pub fn number(&self, name: &str) -> u64 {
        let value = self.header(name);
        let value = value.unwrap_or_else(|| panic!("no {name} header"));
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {value:?}: {e}"))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn post(client: &HttpClient, url: &str, body: impl Into<Bytes>) -> Reply {
    let request = hyper::Request::post(url)
        .body(Full::new(body.into()))
        .unwrap();
    let response = client.request(request).await.expect("request failed");
    Reply::read(response).await
}

/// Prometheus's own checker (Debian's `promtool`, scripts/install-deps.sh)
/// on a `/metrics` scrape: whether it passed, and what it printed.
pub fn promtool(scrape: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (scripts/install-deps.sh installs Debian's prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A PostgreSQL server with the orders plugins' table (plugins/rust/orders),
/// requiring TLS and SCRAM as a managed database does.
pub fn orders_db() -> wasmgate_testkit::PostgresServer {
    let server = wasmgate_testkit::PostgresServer::start_with(wasmgate_testkit::PostgresOptions {
        password: Some("app-pw".into()),
        tls: true,
        ..Default::default()
    });
    let schema = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../plugins/rust/orders/schema.sql"),
    )
    .unwrap();
    server.psql(&format!(
        "{schema}\ngrant all on orders to app; grant all on orders_id_seq to app;"
    ));
    server
}

/// The JSON access log's lines at `path` that `wanted` keeps, once there are
/// at least `n` of them (20 s at most: lines are written as answers end).
pub fn log_lines(
    path: &std::path::Path,
    n: usize,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .filter(|line| wanted(line))
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} lines of {n}: {text}",
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `logs()` contains `needle` (log lines may come after the reply).
pub fn wait_for_log(logs: impl Fn() -> String, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = logs();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no log line with {needle:?} in:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// HTTP over a bare TCP connection, for what a client library would not
/// send (a stalled head, broken framing, plain text to a TLS port): writes
/// `request` to 127.0.0.1:`port` and reads until the server closes or
/// `within` passes. None if the connection or the write fails.
pub fn raw_exchange(port: u16, request: &[u8], within: Duration) -> Option<Vec<u8>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(within)).ok()?;
    stream.write_all(request).ok()?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    Some(answer)
}
