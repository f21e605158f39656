//! Real WebSocket and gRPC peers: the Python scripts of tests/protocols
//! (`websockets` and `grpcio`, installed by scripts/install-deps.sh), as an
//! upstream server and as clients that report what they saw as JSON.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::free_port;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/protocols")
        .join(name)
}

/// A Python upstream (`websocket_peer.py serve` or `grpc_peer.py serve`),
/// killed on drop.
pub struct Peer {
    child: Child,
    pub port: u16,
    host: String,
}

impl Peer {
    /// Starts `script serve PORT args...` and waits for its `ready`.
    pub fn serve(script_name: &str, args: &[&str]) -> Peer {
        Peer::serve_on(script_name, "127.0.0.1", args)
    }

    /// [`Peer::serve`] listening on `host` (`$PEER_HOST`).
    pub fn serve_on(script_name: &str, host: &str, args: &[&str]) -> Peer {
        let port = free_port();
        let mut child = Command::new("python3")
            .env("PEER_HOST", host)
            .arg(script(script_name))
            .arg("serve")
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {script_name}: {e}"));
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready", "{script_name} did not start");
        Peer {
            child,
            port,
            host: host.to_string(),
        }
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a client run reported, and whether its own checks passed.
pub struct ClientRun {
    pub report: serde_json::Value,
    pub ok: bool,
}

/// Runs `script client args...` to its end (at most a minute: a hung
/// peer fails the test instead of stalling CI) and parses the JSON line it
/// printed last.
pub async fn client(script_name: &'static str, args: Vec<String>) -> ClientRun {
    tokio::task::spawn_blocking(move || {
        let output = Command::new("timeout")
            .args(["60", "python3"])
            .arg(script(script_name))
            .arg("client")
            .args(&args)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        let report = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("{script_name} {args:?} printed no JSON ({e}): {stdout}"));
        ClientRun {
            report,
            ok: output.status.success(),
        }
    })
    .await
    .unwrap()
}

/// A client started now and left running (`hold` scenarios): its stdout
/// lines as they come.
pub fn client_running(
    script_name: &str,
    args: &[String],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new("python3")
        .arg(script(script_name))
        .arg("client")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}
