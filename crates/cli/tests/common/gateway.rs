//! A `wasmgate run` process on a YAML configuration written by the test.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use super::{free_port, plugin, wasmgate, HttpClient, Reply};

pub struct GatewayProc {
    pub child: Child,
    pub port: u16,
    pub admin_port: u16,
    _dir: tempfile::TempDir,
    pub config: PathBuf,
}

/// `{wasm:name}` in the YAML becomes the path of plugin `name`;
/// `{listen}` and `{admin}` become free addresses.
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
        let (port, admin_port) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("wasmgate.yaml");
        std::fs::write(&config, render(yaml, port, admin_port)).unwrap();
        let child = wasmgate()
            .args(["run", "-c"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting wasmgate run");
        let mut gateway = GatewayProc {
            child,
            port,
            admin_port,
            _dir: dir,
            config,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = gateway.child.try_wait().unwrap() {
                let mut stderr = String::new();
                use std::io::Read;
                gateway
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr)
                    .unwrap();
                panic!("wasmgate run exited with {status}: {stderr}");
            }
            assert!(
                Instant::now() < deadline,
                "wasmgate run did not start listening within 180 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        gateway
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
