//! Test support for wasmgate: real servers for tests, no mocks.
//!
//! Tests that exercise the services plugins reach through the host (Redis,
//! PostgreSQL) start the real server binaries here, each on a free loopback
//! port with its files in a temporary directory, and stop them afterwards:
//!
//! - [`free_port`]: a loopback port for a server a test starts (shared with
//!   the CLI tests' own servers).
//! - [`RedisServer`]: `redis-server` with a generated configuration, with or
//!   without a password.
//! - [`PostgresServer`]: a fresh `initdb` cluster with a database and role
//!   `app`, optionally with SCRAM-SHA-256 authentication and TLS.
//!
//! - [`EtcdServer`]: a single-member etcd (v3 API) for cluster tests.
//! - [`RegistryServer`]: an OCI registry (distribution's, built from
//!   source) with or without htpasswd or a token service, and `oras` to
//!   push plugins to it, for the OCI tests.
//! - [`KubeApiServer`]: kube-apiserver (built from source) on an etcd of its
//!   own, envtest-style, with the Gateway API CRDs beside it.
//! - [`JaegerServer`]: Jaeger, built from source, receiving OTLP traces and
//!   answering its query API, for the tracing tests.
//! - [`fuzz`]: the fuzzers' seeded randomness, log sink and settings.
//! - [`load`]: many tasks making calls, their outcomes recorded, for the
//!   restart tests.
//! - [`pki`]: a test CA and the server and client certificates it issues
//!   (`openssl`), for the TLS tests.
//!
//! They can be stopped and started again on the same port and data (restart
//! tests) or killed with SIGKILL (crash tests); dropping one stops it and
//! removes its directory. A server that does not come up fails the test with
//! its log in the panic message.
//!
//! The binaries come from the system: `scripts/install-deps.sh` installs
//! `redis-server`, `postgresql` and `openssl` on Debian. PostgreSQL refuses to
//! run as root; as root (CI) its processes run as the `postgres` system user
//! that Debian's package creates.
//!
//! This crate is a dev-dependency only (`publish = false`); it panics instead
//! of returning errors, as test code would.

pub(crate) use rustix::process::Signal;

mod etcd;
pub mod fuzz;
mod jaeger;
mod kubernetes;
pub mod load;
pub mod pki;
mod postgres;
mod redis;
mod registry;

pub use etcd::{EtcdServer, Secured as SecuredEtcd, ETCD_NODE_PASSWORD, ETCD_NODE_USER};
pub use jaeger::JaegerServer;
pub use kubernetes::{gateway_api_crd, KubeApiServer};
pub use postgres::{PostgresOptions, PostgresServer};
pub use redis::{RedisOptions, RedisReply, RedisServer};
pub use registry::{Auth as RegistryAuth, RegistryOptions, RegistryServer, TokenService};

use std::net::TcpListener;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// How long a server may take to start: generous, for a loaded 2-CPU CI
/// machine running several test binaries at once.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a server may take to stop before it is killed.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A port for a child process to listen on. Asking the kernel for port 0
/// and handing the number over races: until the child binds it, the kernel
/// may give the same ephemeral port to a test upstream or an outbound
/// connection. So ports come from below the ephemeral range (32768+ on
/// Linux), each handed out once per test process, and must bind right now.
/// Each process starts at its own offset (by process id), so test binaries
/// running at the same time rarely try the same ports.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 500) as u16 * 20,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(port < 32_768, "test ports exhausted");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Whether this process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Sends `signal` to process `pid`; false if it does not exist.
pub(crate) fn signal(pid: u32, signal: Signal) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|pid| rustix::process::kill_process(pid, signal).is_ok())
}

/// Waits up to `timeout` for `child` to exit; true if it did (and is reaped).
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}

/// Stops `child`: `signal` (the server's graceful shutdown), then SIGKILL if
/// it is still running after [`STOP_TIMEOUT`]. Always reaps it.
pub(crate) fn stop_child(child: &mut Child, graceful: Signal) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    signal(child.id(), graceful);
    if !wait_timeout(child, STOP_TIMEOUT) {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A tool `scripts/install-deps.sh` builds into `target/test-bin` (Jaeger,
/// the OCI registry and oras, kube-apiserver).
pub fn test_bin(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-bin")
        .join(name)
}

/// The official Extism runtime's command line (`reference/extism-ref`, the
/// `extism` crate =1.30.0), which the differential tests compare wasmgate
/// with; `make reference` builds it in its `differential` profile.
pub fn extism_reference() -> std::path::PathBuf {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../reference/extism-ref/target/differential/extism-ref");
    assert!(
        path.exists(),
        "{} is missing: run `make reference` first",
        path.display()
    );
    path
}

/// Spawns `command` (a [`test_bin`] tool) with its output into `log`;
/// panics saying where the tool comes from if it cannot start.
pub(crate) fn spawn_logged(command: &mut std::process::Command, log: &Path) -> Child {
    let file = std::fs::File::create(log).expect("creating the log");
    command
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone().expect("duplicating the log handle"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "starting {} (scripts/install-deps.sh builds it): {e}",
                command.get_program().to_string_lossy()
            )
        })
}

/// Waits until `child` listens on every one of `ports`; panics with `log()`
/// if it exits first or does not within [`START_TIMEOUT`].
pub(crate) fn wait_listening(
    child: &mut Child,
    ports: &[u16],
    name: &str,
    log: impl Fn() -> String,
) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{name} exited with {status} while starting:\n{}", log());
        }
        let listening =
            (ports.iter()).all(|port| std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok());
        if listening {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not start within {START_TIMEOUT:?}:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The contents of a log file, for panic messages.
pub(crate) fn read_log(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) if bytes.is_empty() => format!("({} is empty)", path.display()),
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            // The tail matters; keep panic messages readable.
            const MAX: usize = 16 * 1024;
            if text.len() > MAX {
                let mut start = text.len() - MAX;
                while !text.is_char_boundary(start) {
                    start += 1;
                }
                format!("…{}", &text[start..])
            } else {
                text.into_owned()
            }
        }
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

/// Percent-encodes `s` for the user-info part of a URL.
pub(crate) fn encode_userinfo(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        assert!((20_000..32_768).contains(&a) && (20_000..32_768).contains(&b));
    }

    #[test]
    fn userinfo_is_encoded() {
        assert_eq!(encode_userinfo("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(encode_userinfo("p@ss:w/rd%"), "p%40ss%3Aw%2Frd%25");
    }
}
