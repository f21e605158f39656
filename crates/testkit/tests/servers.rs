//! The servers start, answer, restart, survive SIGKILL and clean up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wasmgate_testkit::{PostgresOptions, PostgresServer, RedisOptions, RedisReply, RedisServer};

/// Polls `condition` for up to a minute (a loaded CI machine is slow).
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn refuses_connections(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

fn assert_removed(dir: &Path) {
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

fn redis_set_get(redis: &RedisServer) {
    assert_eq!(
        redis.command(&["SET", "k", "v"]),
        RedisReply::Simple("OK".into())
    );
    assert_eq!(
        redis.command(&["GET", "k"]),
        RedisReply::Bulk(b"v".to_vec())
    );
}

#[test]
fn redis_starts_restarts_and_survives_kill() {
    let mut redis = RedisServer::start();
    let (port, dir) = (redis.port(), redis.dir().to_path_buf());
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}/0"));
    assert_eq!(redis.command(&["PING"]), RedisReply::Simple("PONG".into()));
    redis_set_get(&redis);
    let config = redis.command(&["CONFIG", "GET", "bind"]);
    assert_eq!(
        config,
        RedisReply::Array(vec![
            RedisReply::Bulk(b"bind".to_vec()),
            RedisReply::Bulk(b"127.0.0.1".to_vec())
        ])
    );

    // client_count sees a client come and go, not itself.
    assert_eq!(redis.client_count(), 0);
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    client.write_all(b"PING\r\n").unwrap();
    let mut pong = [0; 7];
    client.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    assert_eq!(redis.client_count(), 1);
    drop(client);
    eventually("the client's disconnect", || redis.client_count() == 0);

    redis.stop();
    assert!(!redis.is_running());
    assert!(refuses_connections(port));
    redis.start_again();
    assert_eq!(redis.port(), port);
    // Nothing is persisted.
    assert_eq!(redis.command(&["GET", "k"]), RedisReply::Nil);
    redis_set_get(&redis);

    redis.kill();
    assert!(refuses_connections(port));
    redis.start_again();
    assert_eq!(redis.command(&["PING"]), RedisReply::Simple("PONG".into()));

    drop(redis);
    assert!(refuses_connections(port));
    assert_removed(&dir);
}

#[test]
fn redis_with_password_requires_auth() {
    let redis = RedisServer::start_with(RedisOptions {
        password: Some("s3cret/pw".into()),
        ..Default::default()
    });
    let port = redis.port();
    assert_eq!(
        redis.url(),
        format!("redis://:s3cret%2Fpw@127.0.0.1:{port}/0")
    );
    redis_set_get(&redis);

    let mut anonymous = TcpStream::connect(("127.0.0.1", port)).unwrap();
    anonymous.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut reply = [0; 8];
    anonymous.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"-NOAUTH ");
    eventually("client_count to see the unauthenticated client", || {
        redis.client_count() == 1
    });
}

/// `psql` as `app` over TCP (not the socket), with `conninfo` added.
fn psql_tcp(pg: &PostgresServer, password: Option<&str>, conninfo: &str, sql: &str) -> Command {
    let mut psql = Command::new(pg.bin_dir().join("psql"));
    psql.env_remove("PGSSLMODE")
        .env("PGPASSFILE", "/dev/null")
        .args(["-X", "-w", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .arg(format!(
            "host=127.0.0.1 port={} user=app dbname=app connect_timeout=30 {conninfo}",
            pg.port()
        ))
        .args(["-c", sql])
        .stdin(Stdio::null());
    match password {
        Some(password) => psql.env("PGPASSWORD", password),
        None => psql.env_remove("PGPASSWORD"),
    };
    psql
}

fn text(output: &Output) -> String {
    format!(
        "status {}, stdout {:?}, stderr {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn succeeds(mut command: Command) -> String {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn fails(mut command: Command) -> String {
    let output = command.output().unwrap();
    assert!(!output.status.success(), "{}", text(&output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A session of `app` that stays connected until killed.
fn sleeping_session(pg: &PostgresServer) -> Child {
    psql_tcp(pg, None, "", "SELECT pg_sleep(300)")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// PostgreSQL refuses to run as root: as root, the postmaster runs as the
/// `postgres` user and owns the cluster.
fn assert_runs_unprivileged(pg: &PostgresServer) {
    use std::os::unix::fs::MetadataExt;
    let pid_file = std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).unwrap();
    let postmaster = pid_file.lines().next().unwrap();
    let process_uid = std::fs::metadata(format!("/proc/{postmaster}"))
        .unwrap()
        .uid();
    let owner = std::fs::metadata(pg.data_dir()).unwrap().uid();
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    assert_ne!(process_uid, 0, "the postmaster runs as root");
    assert_eq!(
        owner, process_uid,
        "the cluster's owner is not the server's user"
    );
    if me != 0 {
        assert_eq!(process_uid, me);
    }
}

#[test]
fn postgres_starts_restarts_and_survives_kill() {
    let mut pg = PostgresServer::start();
    let (port, dir) = (pg.port(), pg.dir().to_path_buf());
    assert_eq!(pg.url(), format!("postgres://app@127.0.0.1:{port}/app"));
    assert_eq!(pg.ca_cert_path(), None);
    assert_eq!(
        pg.psql("SELECT current_user, current_database()"),
        "postgres|app"
    );
    assert_eq!(pg.psql("SHOW listen_addresses"), "127.0.0.1");
    assert_eq!(pg.psql("SHOW server_encoding"), "UTF8");
    assert_eq!(pg.psql("SHOW lc_collate"), "C");
    assert_runs_unprivileged(&pg);
    pg.psql_as_app("CREATE TABLE t (n int); INSERT INTO t VALUES (1)");
    // Without a password, TCP clients are trusted.
    assert_eq!(
        succeeds(psql_tcp(&pg, None, "", "SELECT count(*) FROM t")),
        "1"
    );

    // Server-side connections of app.
    assert_eq!(pg.app_connection_count(), 0);
    let mut session = sleeping_session(&pg);
    eventually("app's session in pg_stat_activity", || {
        pg.app_connection_count() == 1
    });

    // A fast stop disconnects the session.
    pg.stop();
    assert!(!pg.is_running());
    assert!(refuses_connections(port));
    assert!(!session.wait().unwrap().success());
    pg.start_again();
    assert_eq!(pg.port(), port);
    assert_eq!(pg.app_connection_count(), 0);
    pg.psql_as_app("INSERT INTO t VALUES (2)");

    // A crash: committed data survives, the session is cut off.
    let mut session = sleeping_session(&pg);
    eventually("app's session in pg_stat_activity", || {
        pg.app_connection_count() == 1
    });
    pg.kill();
    assert!(refuses_connections(port));
    assert!(!session.wait().unwrap().success());
    pg.start_again();
    assert_eq!(
        pg.psql("SELECT string_agg(n::text, ',' ORDER BY n) FROM t"),
        "1,2"
    );
    assert!(
        pg.log().contains("database system was interrupted"),
        "no crash recovery in the log:\n{}",
        pg.log()
    );

    // Killed twice in a row, still fine.
    pg.kill();
    pg.start_again();
    assert_eq!(pg.psql("SELECT count(*) FROM t"), "2");

    drop(pg);
    assert!(refuses_connections(port));
    assert_removed(&dir);
}

#[test]
fn postgres_with_scram_and_tls() {
    let mut pg = PostgresServer::start_with(PostgresOptions {
        password: Some("pa's s@word".into()),
        tls: true,
        max_connections: Some(12),
        ..Default::default()
    });
    let (port, dir) = (pg.port(), pg.dir().to_path_buf());
    assert_eq!(
        pg.url(),
        format!("postgres://app:pa%27s%20s%40word@127.0.0.1:{port}/app?sslmode=require")
    );
    let cert = pg.ca_cert_path().unwrap();
    assert!(std::fs::read_to_string(&cert)
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
    assert_eq!(pg.psql("SHOW max_connections"), "12");
    assert_eq!(pg.psql("SHOW ssl"), "on");
    assert_eq!(
        pg.psql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'app'"),
        "t"
    );

    let password = Some("pa's s@word");
    // The certificate verifies for 127.0.0.1 (and localhost).
    let verify = format!("sslmode=verify-full sslrootcert={}", cert.display());
    let sql = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    assert_eq!(succeeds(psql_tcp(&pg, password, &verify, sql)), "t");
    // The method is SCRAM: a wrong or missing password fails.
    let wrong = fails(psql_tcp(&pg, Some("nope"), &verify, sql));
    assert!(wrong.contains("password authentication failed"), "{wrong}");
    fails(psql_tcp(&pg, None, &verify, sql));
    // Plain TCP is refused (hostssl).
    let plain = fails(psql_tcp(&pg, password, "sslmode=disable", sql));
    assert!(plain.contains("no encryption"), "{plain}");

    pg.kill();
    pg.start_again();
    assert_eq!(succeeds(psql_tcp(&pg, password, &verify, sql)), "t");
    pg.stop();
    pg.start_again();
    assert_eq!(succeeds(psql_tcp(&pg, password, &verify, "SELECT 1")), "1");

    drop(pg);
    assert!(refuses_connections(port));
    assert_removed(&dir);
}

#[test]
#[should_panic(expected = "unrecognized configuration parameter \"no_such_setting\"")]
fn postgres_that_cannot_start_fails_with_its_log() {
    PostgresServer::start_with(PostgresOptions {
        config: vec!["no_such_setting = 1".into()],
        ..Default::default()
    });
}

#[test]
#[should_panic(expected = "no-such-directive")]
fn redis_that_cannot_start_fails_with_its_log() {
    RedisServer::start_with(RedisOptions {
        config: vec!["no-such-directive yes".into()],
        ..Default::default()
    });
}
