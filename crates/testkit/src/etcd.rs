//! A single-member etcd server (Debian's `etcd-server`) for cluster tests:
//! client and peer URLs on free loopback ports, its data in a temporary
//! directory, started again on the same ports and data after a stop or kill.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pki::{Issued, KeyType, Pki};
use crate::{free_port, read_log, stop_child, START_TIMEOUT};

pub struct EtcdServer {
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    secured: Option<Secured>,
}

/// A secured etcd's CA and certificates, and its users.
pub struct Secured {
    pub pki: Pki,
    server: Issued,
    /// A client certificate etcd accepts (`--client-cert-auth`), for nodes.
    pub client: Issued,
    /// Set once `auth enable` ran: etcdctl then signs in as root.
    auth_on: bool,
}

/// The user a secured etcd has for nodes (read-write on `/wasmgate/`), and
/// its password.
pub const ETCD_NODE_USER: &str = "wasmgate";
pub const ETCD_NODE_PASSWORD: &str = "node-secret-7f3a";
const ROOT: &str = "root:root-secret-91c2";

impl EtcdServer {
    /// Starts etcd and waits until it serves requests.
    pub fn start() -> EtcdServer {
        EtcdServer::starting(None)
    }

    /// An etcd as a careful operator runs it: TLS on the client URL with a
    /// CA of the test's own, client certificates required
    /// (`--client-cert-auth`), and `auth enable` with a user for nodes
    /// ([`ETCD_NODE_USER`], read-write on `/wasmgate/` only) besides root.
    pub fn start_secured() -> EtcdServer {
        let pki = Pki::new("etcd test CA");
        let server = pki.server(&["IP:127.0.0.1", "localhost"], KeyType::EcdsaP256, 1, 1);
        let client = pki.client("wasmgate-node", "spiffe://test/etcd-client");
        let mut etcd = EtcdServer::starting(Some(Secured {
            pki,
            server,
            client,
            auth_on: false,
        }));
        etcd.etcdctl(&["user", "add", ROOT, "--interactive=false"]);
        // Recent etcdctl grants root its role with the user; older ones
        // need it granted (and refuse a second grant), so either is fine.
        let _ = etcd
            .etcdctl_command()
            .args(["user", "grant-role", "root", "root"])
            .output();
        etcd.etcdctl(&["role", "add", "wasmgate-node"]);
        etcd.etcdctl(&[
            "role",
            "grant-permission",
            "wasmgate-node",
            "readwrite",
            "/wasmgate/",
            "--prefix=true",
        ]);
        let user = format!("{ETCD_NODE_USER}:{ETCD_NODE_PASSWORD}");
        etcd.etcdctl(&["user", "add", &user, "--interactive=false"]);
        etcd.etcdctl(&["user", "grant-role", ETCD_NODE_USER, "wasmgate-node"]);
        etcd.etcdctl(&["auth", "enable"]);
        if let Some(secured) = &mut etcd.secured {
            secured.auth_on = true;
        }
        etcd
    }

    /// The CA, client certificate and users of an etcd from [`start_secured`].
    pub fn secured(&self) -> &Secured {
        self.secured.as_ref().expect("an etcd from start_secured")
    }

    fn starting(secured: Option<Secured>) -> EtcdServer {
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
            secured,
        };
        server.spawn();
        server
    }

    /// The client URL (`http://127.0.0.1:PORT`, `https://` when secured).
    pub fn url(&self) -> String {
        let scheme = if self.secured.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
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
    /// A secured etcd is reached with its CA and client certificate, as root
    /// once auth is on.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let out = self
            .etcdctl_command()
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

    fn etcdctl_command(&self) -> Command {
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()));
        if let Some(secured) = &self.secured {
            command
                .arg("--cacert")
                .arg(&secured.pki.ca)
                .arg("--cert")
                .arg(&secured.client.cert)
                .arg("--key")
                .arg(&secured.client.key);
            if secured.auth_on {
                command.arg(format!("--user={ROOT}"));
            }
        }
        command
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
        let mut etcd = Command::new("etcd");
        if let Some(secured) = &self.secured {
            etcd.arg("--cert-file")
                .arg(&secured.server.cert)
                .arg("--key-file")
                .arg(&secured.server.key)
                .arg("--trusted-ca-file")
                .arg(&secured.pki.ca)
                .arg("--client-cert-auth");
        }
        let child = etcd
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
            let healthy = self
                .etcdctl_command()
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
