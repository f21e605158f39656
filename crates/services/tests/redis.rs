//! The Redis service against a real redis-server (started by the test on a
//! free port): commands and replies, raw RESP for Higress's ABI, refused
//! credentials, timeouts, a server that is down, and a restart under load
//! after which the connections recover by themselves without leaking.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgate_services::redis::{reply_to_json, Access, RedisService};
use wasmgate_services::{Service, ServiceConfig, Services};
use wasmgate_testkit::load::Load;
use wasmgate_testkit::{RedisOptions, RedisServer};

fn service(url: &str, pool_size: usize) -> Arc<Service> {
    let mut config = ServiceConfig::from_flag(&format!("cache={url}")).unwrap();
    config.pool_size = pool_size;
    config.timeout_ms = Some(500);
    config.connect_timeout_ms = 500;
    Services::build(&[config], &Services::new())
        .unwrap()
        .all()
        .remove(0)
}

fn redis(service: &Service) -> &RedisService {
    match service {
        Service::Redis(redis) => redis,
        Service::Postgres(_) => unreachable!(),
    }
}

fn args(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_replies_and_raw_resp() {
    let server = RedisServer::start();
    let s = service(&server.url(), 2);
    let r = redis(&s);
    let access = Access::default();
    let reply = r
        .command(&access, &args(&["SET", "k", "v"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), "OK");
    let reply = r
        .command(&access, &args(&["INCR", "n"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), 1);
    let reply = r
        .command(&access, &args(&["MGET", "k", "n", "none"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), serde_json::json!(["v", "1", null]));
    let e = r
        .command(&access, &args(&["INCR", "k"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "redis");
    assert!(
        e.to_string().starts_with("ERR value is not an integer"),
        "{e}"
    );
    // Higress's framework sends RESP and reads the reply as Redis wrote it.
    let raw = r
        .call_resp(&access, b"*2\r\n$4\r\nincr\r\n$1\r\nn\r\n", None)
        .await
        .unwrap();
    assert_eq!(raw, b":2\r\n");
    let raw = r
        .call_resp(&access, b"*1\r\n$5\r\nnosuc\r\n", None)
        .await
        .unwrap();
    assert!(
        raw.starts_with(b"-ERR unknown command"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // Another database, as Higress's `?db=N` asks.
    let db3 = Access {
        db: Some(3),
        ..Access::default()
    };
    r.command(&db3, &args(&["SET", "k", "in-3"]), None)
        .await
        .unwrap();
    let reply = r
        .command(&access, &args(&["GET", "k"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), "v");
    assert_eq!(s.stats().calls(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_refused_and_slow_servers_fail_clearly() {
    // Nothing listens: unavailable, within the connect timeout.
    let port = wasmgate_testkit::free_port();
    let s = service(&format!("redis://127.0.0.1:{port}"), 1);
    let started = Instant::now();
    let e = redis(&s)
        .command(&Access::default(), &args(&["PING"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let server = RedisServer::start_with(RedisOptions {
        password: Some("pw".into()),
        ..RedisOptions::default()
    });
    // Wrong credentials are refused when connecting.
    let wrong = server.url().replace(":pw@", ":nope@");
    let s = service(&wrong, 1);
    let e = redis(&s)
        .command(&Access::default(), &args(&["PING"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "{e}");
    // Credentials from the plugin (proxy_redis_init) are used when given.
    let bare = server.url().replace(":pw@", "@").replace("default@", "");
    let s = service(&bare, 1);
    let plugin = Access {
        password: Some("pw".into()),
        ..Access::default()
    };
    let reply = redis(&s)
        .command(&plugin, &args(&["PING"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), "PONG");
    // The password from a file (a mounted Secret key), not the URL; a
    // rotated file is a new service at the next build, the same file the
    // same service.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "pw\n").unwrap();
    let mut from_file = ServiceConfig::from_flag(&format!("cache={bare}")).unwrap();
    from_file.password_file = Some(file.clone());
    let built = Services::build(std::slice::from_ref(&from_file), &Services::new()).unwrap();
    let reply = redis(&built.all()[0])
        .command(&Access::default(), &args(&["PING"]), None)
        .await
        .unwrap();
    assert_eq!(reply_to_json(&reply), "PONG");
    let again = Services::build(std::slice::from_ref(&from_file), &built).unwrap();
    assert!(Arc::ptr_eq(&again.all()[0], &built.all()[0]));
    std::fs::write(&file, "rotated").unwrap();
    let rotated = Services::build(std::slice::from_ref(&from_file), &built).unwrap();
    assert!(!Arc::ptr_eq(&rotated.all()[0], &built.all()[0]));
    let e = redis(&rotated.all()[0])
        .command(&Access::default(), &args(&["PING"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "the server still wants `pw`: {e}");
    std::fs::remove_file(&file).unwrap();
    let Err(gone) = Services::build(std::slice::from_ref(&from_file), &built) else {
        panic!("a password file that is gone was accepted");
    };
    assert!(gone.1.contains("cannot read"), "{gone:?}");
    assert!(from_file
        .check()
        .iter()
        .any(|(field, _)| *field == "password_file"));
    // A command that runs past the timeout.
    let slow = "local t = redis.call('TIME'); local s = t[1] + 1; \
                while tonumber(redis.call('TIME')[1]) <= s do end return 1";
    let e = redis(&s)
        .command(&plugin, &args(&["EVAL", slow, "0"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "timeout", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_recovers_without_leaking_connections() {
    let mut server = RedisServer::start();
    let s = service(&server.url(), 3);
    let load = Load::start(8, {
        let s = s.clone();
        move || {
            let s = s.clone();
            async move {
                let incr = args(&["INCR", "n"]);
                let r = redis(&s).command(&Access::default(), &incr, None).await;
                r.map(drop).map_err(|e| e.kind().to_string())
            }
        }
    });
    load.until_more_calls(50).await;
    server.kill();
    load.until_more_failures(8).await;
    server.start_again();
    load.until_recovered(50, Duration::from_secs(15)).await;
    let outcomes = load.stop().await;
    let failed: Vec<&String> = outcomes.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!failed.is_empty(), "the server was not down under load");
    assert!(
        failed
            .iter()
            .all(|k| *k == "unavailable" || *k == "timeout"),
        "{failed:?}"
    );
    let open = server.client_count();
    assert!(
        (1..=3).contains(&open),
        "{open} connections open for a pool of 3"
    );
}

/// Redis restarted while the pool's connections sit idle: each connection is
/// broken, yet the first command after the restart on every one of them
/// succeeds (it is sent again on its replacement), and so does every command
/// once Redis is back after a stop that commands did meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_command_after_a_restart_succeeds_on_every_connection() {
    let mut server = RedisServer::start();
    let pool = 4;
    let s = service(&server.url(), pool);
    let (access, incr_n) = (Access::default(), args(&["INCR", "n"]));
    let incr = || redis(&s).command(&access, &incr_n, None);
    // Round robin: `pool` commands open every connection.
    for _ in 0..pool {
        incr().await.unwrap();
    }
    server.kill();
    server.start_again();
    for i in 0..pool {
        incr()
            .await
            .unwrap_or_else(|e| panic!("command {i} after an idle restart: {e}"));
    }
    // Down while commands come: they fail as `unavailable`; once it is
    // back, the next command on every connection succeeds.
    server.kill();
    for _ in 0..pool {
        let e = incr().await.unwrap_err();
        assert!(matches!(e.kind(), "unavailable" | "timeout"), "{e}");
    }
    server.start_again();
    for i in 0..pool {
        incr()
            .await
            .unwrap_or_else(|e| panic!("command {i} once Redis was back: {e}"));
    }
}

/// Once one command has met a broken connection, the pool's other broken
/// connections are replaced in the background, with no command of their
/// own (so the retry on a fresh connection is the exception, not the way
/// each connection comes back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_connections_are_replaced_in_the_background() {
    let mut server = RedisServer::start();
    let pool = 4;
    let s = service(&server.url(), pool);
    let (access, incr_n) = (Access::default(), args(&["INCR", "n"]));
    for _ in 0..pool {
        redis(&s).command(&access, &incr_n, None).await.unwrap();
    }
    server.kill();
    server.start_again();
    // Nothing has reconnected yet: nothing has tried.
    assert_eq!(server.client_count(), 0);
    redis(&s).command(&access, &incr_n, None).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.client_count() < pool {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {pool} connections back",
            server.client_count()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
