//! A real PostgreSQL server (a fresh `initdb` cluster) for a test.
//!
//! PostgreSQL refuses to run as root. As root (CI), `initdb` and `postgres`
//! run as the `postgres` system user (Debian's package creates it) and the
//! temporary directory belongs to that user; `psql` and `openssl` run as the
//! caller (root reaches the socket and files anyway).
//!
//! The postmaster is started directly (`postgres -D DATA`, what `pg_ctl
//! start` runs) as a child of the test, not daemonized through `pg_ctl`: the
//! test reaps it, so a killed postmaster leaves no zombie whose pid would
//! still look alive in `postmaster.pid` (a container's init may not reap
//! orphans) and block the next start; and an early exit is seen at once.
//! Stopping sends SIGINT, which is `pg_ctl stop -m fast`.

use std::fs::OpenOptions;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{encode_userinfo, free_port, is_root, read_log, signal, stop_child, START_TIMEOUT};

/// How [`PostgresServer::start_with`] configures the server.
#[derive(Clone, Debug, Default)]
pub struct PostgresOptions {
    /// The password of role `app`. `Some`: TCP clients authenticate with
    /// SCRAM-SHA-256 (`pg_hba`: `scram-sha-256`). `None`: TCP clients are
    /// trusted and the role has no password.
    pub password: Option<String>,
    /// `ssl = on` with a self-signed certificate for `localhost` and
    /// `127.0.0.1` ([`PostgresServer::ca_cert_path`]); TCP clients must then
    /// use TLS (`pg_hba`: `hostssl`).
    pub tls: bool,
    /// `max_connections` (PostgreSQL's default is 100). Three of them are
    /// reserved for superusers (`superuser_reserved_connections`), so role
    /// `app` gets `max_connections - 3`.
    pub max_connections: Option<u32>,
    /// Further lines for postgresql.conf, such as `"log_connections = on"`.
    pub config: Vec<String>,
}

/// A PostgreSQL server on a free loopback port with a database `app` owned
/// by role `app`, its cluster, socket and log in a temporary directory. It
/// is stopped and the directory removed when dropped.
///
/// TCP listens on 127.0.0.1 only; the superuser `postgres` connects through
/// the Unix socket in the temporary directory (trusted), as [`psql`] does.
///
/// [`psql`]: PostgresServer::psql
pub struct PostgresServer {
    port: u16,
    password: Option<String>,
    tls: bool,
    bin: &'static Path,
    /// The `postgres` user's uid and gid when running as root.
    run_as: Option<(u32, u32)>,
    dir: TempDir,
    child: Option<Child>,
}

impl PostgresServer {
    /// Starts a server without password or TLS (TCP clients trusted).
    pub fn start() -> PostgresServer {
        PostgresServer::start_with(PostgresOptions::default())
    }

    /// Creates a cluster configured by `options`, starts it, waits until it
    /// accepts connections and creates role and database `app`.
    pub fn start_with(options: PostgresOptions) -> PostgresServer {
        let bin = bin_dir();
        let run_as = is_root().then(postgres_user);
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-pg-")
            .tempdir()
            .expect("creating a temporary directory for PostgreSQL");
        let port = free_port();
        let mut server = PostgresServer {
            port,
            password: options.password.clone(),
            tls: options.tls,
            bin,
            run_as,
            dir,
            child: None,
        };
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(server.dir(), Some(uid), Some(gid))
                .expect("handing the temporary directory to the postgres user");
            let reachable = server
                .as_server_user(Command::new("test"))
                .args(["-w".as_ref(), server.dir().as_os_str()])
                .status()
                .is_ok_and(|status| status.success());
            assert!(
                reachable,
                "the postgres user cannot write to {}: point TMPDIR at a directory it can reach (such as /tmp)",
                server.dir().display()
            );
        }

        server.init(&options);
        server.spawn();
        let role = match &options.password {
            Some(password) => format!("CREATE ROLE app LOGIN PASSWORD {}", literal(password)),
            None => "CREATE ROLE app LOGIN".to_owned(),
        };
        server.run_psql(
            "postgres",
            "postgres",
            &[&role, "CREATE DATABASE app OWNER app"],
        );
        server
    }

    /// `postgres://app:PASSWORD@127.0.0.1:PORT/app` (no `:PASSWORD` without
    /// one), with `?sslmode=require` when TLS is on.
    pub fn url(&self) -> String {
        let user = match &self.password {
            Some(password) => format!("app:{}", encode_userinfo(password)),
            None => "app".to_owned(),
        };
        let query = if self.tls { "?sslmode=require" } else { "" };
        format!("postgres://{user}@127.0.0.1:{}/app{query}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's self-signed certificate (PEM) for clients to trust, when
    /// TLS is on. It names `localhost` and `127.0.0.1`, and is not a CA
    /// (rustls rejects a CA certificate as a server's own).
    pub fn ca_cert_path(&self) -> Option<PathBuf> {
        self.tls.then(|| self.data_dir().join("server.crt"))
    }

    /// The temporary directory: `data/` (the cluster), the socket, postgres.log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory of the PostgreSQL programs used (`psql`, `pg_isready`,
    /// …), for tests that run a client of their own.
    pub fn bin_dir(&self) -> &Path {
        self.bin
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    /// What the server has logged (all runs).
    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }

    /// Runs `sql` in database `app` as the superuser over the Unix socket and
    /// returns what `psql -A -t` prints (rows on lines, columns separated by
    /// `|`), trimmed. Statements run in one transaction. Objects created this
    /// way belong to `postgres`: grant them to `app`, or use
    /// [`psql_as_app`](Self::psql_as_app). Panics if the SQL fails.
    pub fn psql(&self, sql: &str) -> String {
        self.run_psql("app", "postgres", &[sql])
    }

    /// [`psql`](Self::psql) as role `app`, so fixtures belong to it.
    pub fn psql_as_app(&self, sql: &str) -> String {
        self.run_psql("app", "app", &[sql])
    }

    /// The number of server processes serving role `app`: its connections.
    pub fn app_connection_count(&self) -> usize {
        let count = self.psql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'");
        count
            .parse()
            .unwrap_or_else(|_| panic!("pg_stat_activity count: {count:?}"))
    }

    /// Whether the postmaster is running (started and not stopped or killed).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Fast shutdown (SIGINT, `pg_ctl stop -m fast`): disconnects clients,
    /// checkpoints, exits. Waits for it. Does nothing if it is not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, crate::Signal::INT);
        }
    }

    /// Kills the postmaster with SIGKILL and with it its server processes
    /// (which would exit on their own once they notice), as a crash of the
    /// whole server would, and waits until they are gone. The data directory
    /// stays as the crash left it: [`start_again`](Self::start_again) runs
    /// crash recovery.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let postmaster = child.id();
        let children = children_of(postmaster);
        let _ = child.kill();
        let _ = child.wait();
        for &pid in &children {
            signal(pid, crate::Signal::KILL);
        }
        // They are no longer ours to reap; wait until they have exited (or
        // are zombies, which hold no shared memory), or the next postmaster
        // refuses to start: "pre-existing shared memory block is still in use".
        let deadline = Instant::now() + START_TIMEOUT;
        while children.iter().any(|&pid| !exited(pid)) {
            assert!(
                Instant::now() < deadline,
                "the server processes of the killed postmaster did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the stopped or killed server again: the same port, directory
    /// and data (after a kill, PostgreSQL first recovers from its WAL).
    pub fn start_again(&mut self) {
        assert!(
            !self.is_running(),
            "start_again: PostgreSQL on port {} is still running",
            self.port
        );
        self.spawn();
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join("postgres.log")
    }

    /// `command` running as the `postgres` user when we are root.
    fn as_server_user(&self, mut command: Command) -> Command {
        if let Some((uid, gid)) = self.run_as {
            // std drops the supplementary groups too (setgroups) when root.
            command
                .uid(uid)
                .gid(gid)
                .env("HOME", self.dir())
                .env("USER", "postgres")
                .env("LOGNAME", "postgres");
        }
        command.current_dir(self.dir());
        command
    }

    /// initdb, then the configuration: port, socket, listen address,
    /// authentication, TLS.
    fn init(&self, options: &PostgresOptions) {
        let data = self.data_dir();
        let output = self
            .as_server_user(Command::new(self.bin.join("initdb")))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--locale=C",
                "--encoding=UTF8",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("running initdb");
        if !output.status.success() {
            panic!(
                "initdb failed ({}):\n{}",
                output.status,
                output_text(&output)
            );
        }

        let mut conf = format!(
            "\n# Added by wasmgate-testkit.\n\
             listen_addresses = '127.0.0.1'\n\
             port = {}\n\
             unix_socket_directories = {}\n\
             password_encryption = 'scram-sha-256'\n\
             # A test cluster survives a crash of the server (commits are in the\n\
             # kernel's page cache when they return), not of the machine.\n\
             fsync = off\n\
             full_page_writes = off\n",
            self.port,
            literal(&self.dir().to_string_lossy()),
        );
        if let Some(max) = options.max_connections {
            conf.push_str(&format!("max_connections = {max}\n"));
        }
        if options.tls {
            self.make_certificate();
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        for line in &options.config {
            conf.push_str(line);
            conf.push('\n');
        }
        append(&data.join("postgresql.conf"), &conf);

        let host = if options.tls { "hostssl" } else { "host" };
        let method = if options.password.is_some() {
            "scram-sha-256"
        } else {
            "trust"
        };
        let hba = format!(
            "# Written by wasmgate-testkit.\n\
             local all all trust\n\
             {host} all all 127.0.0.1/32 {method}\n"
        );
        std::fs::write(data.join("pg_hba.conf"), hba).expect("writing pg_hba.conf");

        if let Some((uid, gid)) = self.run_as {
            chown_tree(self.dir(), uid, gid);
        }
    }

    /// A self-signed certificate and key in the data directory. Beyond the
    /// plain `openssl req -x509`: subjectAltName (rustls ignores the CN) and
    /// CA:FALSE (rustls rejects a CA certificate as a server's own).
    fn make_certificate(&self) {
        let data = self.data_dir();
        let (cert, key) = (data.join("server.crt"), data.join("server.key"));
        let output = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args([
                "-addext",
                "keyUsage=critical,digitalSignature,keyEncipherment",
            ])
            .args(["-addext", "extendedKeyUsage=serverAuth"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| {
                panic!("cannot run openssl ({err}): install it with scripts/install-deps.sh")
            });
        if !output.status.success() {
            panic!(
                "openssl req failed ({}):\n{}",
                output.status,
                output_text(&output)
            );
        }
        // PostgreSQL refuses a key others may read.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 server.key");
    }

    /// Starts the postmaster and waits until it accepts connections.
    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening postgres.log");
        if let Some((uid, gid)) = self.run_as {
            let _ = std::os::unix::fs::chown(self.log_path(), Some(uid), Some(gid));
        }
        let log_err = log
            .try_clone()
            .expect("duplicating the postgres.log handle");
        let child = self
            .as_server_user(Command::new(self.bin.join("postgres")))
            .arg("-D")
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .expect("running postgres");
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.child.as_mut().unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                panic!(
                    "PostgreSQL on port {} exited with {status} while starting; its log:\n{}",
                    self.port,
                    self.log()
                );
            }
            if self.accepting() {
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "PostgreSQL on port {} did not accept connections within {:?}; its log:\n{}",
                    self.port,
                    START_TIMEOUT,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `pg_isready` over the socket: accepting connections (not starting up
    /// or recovering).
    fn accepting(&self) -> bool {
        self.client(Command::new(self.bin.join("pg_isready")))
            .args(["-q", "-t", "5", "-U", "postgres", "-d", "postgres"])
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A client program connecting over the socket, unaffected by the
    /// caller's PG* environment.
    fn client(&self, mut command: Command) -> Command {
        for var in [
            "PGHOST",
            "PGHOSTADDR",
            "PGPORT",
            "PGUSER",
            "PGDATABASE",
            "PGPASSWORD",
            "PGPASSFILE",
            "PGSERVICE",
            "PGSERVICEFILE",
            "PGOPTIONS",
            "PGSSLMODE",
            "PGCONNECT_TIMEOUT",
        ] {
            command.env_remove(var);
        }
        command
            .arg("-h")
            .arg(self.dir())
            .args(["-p", &self.port.to_string()])
            .stdin(Stdio::null());
        command
    }

    /// Runs each of `commands` (one `-c` each, so each is its own
    /// transaction) in `database` as `user`; their output, trimmed.
    fn run_psql(&self, database: &str, user: &str, commands: &[&str]) -> String {
        let mut psql = self.client(Command::new(self.bin.join("psql")));
        psql.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            user,
            "-d",
            database,
        ]);
        for sql in commands {
            psql.args(["-c", sql]);
        }
        let output = psql.output().expect("running psql");
        if !output.status.success() {
            panic!(
                "psql as {user} in {database} failed ({}) running {commands:?}:\n{}\nthe server's log:\n{}",
                output.status,
                output_text(&output),
                self.log()
            );
        }
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The directory of the PostgreSQL server programs: Debian's
/// `/usr/lib/postgresql/<version>/bin` (the highest version), else that of
/// `initdb` on PATH.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let complete = |dir: &Path| {
            ["initdb", "postgres", "psql", "pg_isready"]
                .iter()
                .all(|program| dir.join(program).is_file())
        };
        let mut debian: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry
                    .file_name()
                    .to_str()?
                    .split('.')
                    .map(|part| part.parse().ok())
                    .collect::<Option<Vec<u32>>>()?;
                Some((version, entry.path().join("bin")))
            })
            .filter(|(_, dir)| complete(dir))
            .collect();
        debian.sort();
        if let Some((_, dir)) = debian.pop() {
            return dir;
        }
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .filter_map(|dir| std::fs::canonicalize(dir.join("initdb")).ok())
            .filter_map(|initdb| initdb.parent().map(Path::to_path_buf))
            .find(|dir| complete(dir))
            .expect(
                "PostgreSQL server programs (initdb, postgres, psql, pg_isready) not found in \
                 /usr/lib/postgresql/*/bin or PATH: install them with scripts/install-deps.sh",
            )
    })
}

/// The uid and gid of the `postgres` system user.
fn postgres_user() -> (u32, u32) {
    let output = Command::new("getent").args(["passwd", "postgres"]).output();
    let line = output
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default();
    let fields: Vec<&str> = line.trim().split(':').collect();
    match (
        fields.get(2).map(|f| f.parse()),
        fields.get(3).map(|f| f.parse()),
    ) {
        (Some(Ok(uid)), Some(Ok(gid))) => (uid, gid),
        _ => panic!(
            "running as root, but there is no `postgres` user to run PostgreSQL as (it refuses \
             to run as root): install Debian's postgresql package (scripts/install-deps.sh) or \
             run the tests as another user"
        ),
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .unwrap_or_else(|err| panic!("chown {}: {err}", path.display()));
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).expect("listing the temporary directory") {
            chown_tree(
                &entry.expect("listing the temporary directory").path(),
                uid,
                gid,
            );
        }
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .unwrap_or_else(|err| panic!("appending to {}: {err}", path.display()));
}

/// An SQL (and postgresql.conf) string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn output_text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The processes whose parent is `pid` (from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| proc_stat(child).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Whether `pid` has exited (gone, or a zombie).
fn exited(pid: u32) -> bool {
    match proc_stat(pid) {
        None => true,
        Some((state, _)) => state == 'Z' || state == 'X',
    }
}

/// The state and parent pid of `pid`, from /proc/PID/stat.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID …"; COMM may hold spaces and parentheses.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let parent = rest.next()?.parse().ok()?;
    Some((state, parent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_quoted() {
        assert_eq!(literal("it's"), "'it''s'");
    }

    #[test]
    fn own_stat_parses() {
        let (state, parent) = proc_stat(std::process::id()).unwrap();
        assert!(state == 'R' || state == 'S', "{state}");
        assert_eq!(parent, std::os::unix::process::parent_id());
    }
}
