//! A single-member etcd server (Debian's `etcd-server`) for cluster tests:
//! client and peer URLs on free loopback ports, its data in a temporary
//! directory, started again on the same ports and data after a stop or kill.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, read_log, stop_child, START_TIMEOUT};

pub struct EtcdServer {
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts etcd and waits until it serves requests.
    pub fn start() -> EtcdServer {
        // In memory where the machine has it: etcd syncs its log on every
        // write, and a shared CI disk has been seen to stall fsync for 5 s,
        // longer than a node's etcd timeout. What is tested is wasmgate, not
        // the disk.
        let shm = std::path::Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder.prefix("wasmgate-etcd-");
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .expect("creating a temporary directory for etcd");
        let mut server = EtcdServer {
            client_port: free_port(),
            peer_port: free_port(),
            dir,
            child: None,
        };
        server.spawn();
        server
    }

    /// The client URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// What etcd has logged (all runs).
    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Runs `etcdctl` (API v3) against this server; its stdout. Panics if it fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .args(args)
            .output()
            .expect("running etcdctl (install etcd-client)");
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops etcd (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, crate::Signal::TERM);
        }
    }

    /// Kills etcd with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped or killed etcd again: same ports, same data.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "start_again: etcd is still running");
        self.spawn();
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening etcd.log");
        let log_err = log.try_clone().expect("duplicating the etcd.log handle");
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "test"])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--log-level", "warn", "--logger", "zap"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .expect("starting etcd (install etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("etcd exited with {status} while starting:\n{}", self.log());
            }
            let healthy = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", self.url()))
                .args(["--command-timeout=1s", "endpoint", "health"])
                .output()
                .is_ok_and(|o| o.status.success());
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
