//! The PostgreSQL service against a real server (started by the test on a
//! free port): the type mapping both ways, errors with their SQLSTATE, TLS
//! with SCRAM, timeouts that cancel, bounded waits for a connection, and a
//! restart under load after which the pool recovers without leaking.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasmgate_services::postgres::PgService;
use wasmgate_services::{Service, ServiceConfig, ServiceError, Services};
use wasmgate_testkit::load::Load;
use wasmgate_testkit::{PostgresOptions, PostgresServer};

fn service(config: ServiceConfig) -> Arc<Service> {
    Services::build(&[config], &Services::new())
        .unwrap()
        .all()
        .remove(0)
}

fn pg(service: &Service) -> &PgService {
    match service {
        Service::Postgres(pg) => pg,
        Service::Redis(_) => unreachable!(),
    }
}

fn config(url: String) -> ServiceConfig {
    let mut config = ServiceConfig::from_flag(&format!("db={url}")).unwrap();
    config.pool_size = 4;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_convert_exactly_both_ways() {
    let server = PostgresServer::start();
    server.psql(
        "create table t (b bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric(30,10),
           tx text, vc varchar(10), bp char(3), by bytea, j json, jb jsonb, tz timestamptz,
           ts timestamp, d date, tm time, u uuid, ia int4[], ta text[], nothing int4);
         create type mood as enum ('happy', 'sad'); alter table t add column m mood;
         grant all on t to app;",
    );
    let s = service(config(server.url()));
    let db = pg(&s);
    let params = json!([
        true, -32768, 2147483647, 9007199254740993i64, 1.5, -0.25,
        "12345678901234567890.0123456789", "tekst ✓", "short", "abc",
        {"base64": "AP8Q"}, {"a": [1, 2]}, {"b": null},
        "2026-11-24T10:00:00.123456+02:00", "2026-11-24T10:00:00.5", "2026-11-24", "23:59:59.000001",
        "67e55044-10b1-426f-9247-bb680e5fe0c8", [1, null, 3], ["x", "y"], null, "sad"
    ]);
    let insert = "insert into t values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)";
    let inserted = db
        .execute(insert, params.as_array().unwrap(), None)
        .await
        .unwrap();
    assert_eq!(inserted, 1);
    let result = db.query("select * from t", &[], None).await.unwrap();
    let types: Vec<&str> = result.columns.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "bool",
            "int2",
            "int4",
            "int8",
            "float4",
            "float8",
            "numeric",
            "text",
            "varchar",
            "bpchar",
            "bytea",
            "json",
            "jsonb",
            "timestamptz",
            "timestamp",
            "date",
            "time",
            "uuid",
            "_int4",
            "_text",
            "int4",
            "mood"
        ]
    );
    let row = Value::Array(result.rows[0].clone());
    assert_eq!(
        row,
        json!([
            true, -32768, 2147483647, 9007199254740993i64, 1.5, -0.25,
            "12345678901234567890.0123456789", "tekst ✓", "short", "abc",
            {"base64": "AP8Q"}, {"a": [1, 2]}, {"b": null},
            "2026-11-24T08:00:00.123456Z", "2026-11-24T10:00:00.500000", "2026-11-24",
            "23:59:59.000001", "67e55044-10b1-426f-9247-bb680e5fe0c8", [1, null, 3], ["x", "y"],
            null, "sad"
        ])
    );
    // Numeric edge values, NaN and infinities survive too.
    let result = db
        .query(
            "select $1::numeric, $2::numeric, 'NaN'::numeric, 'Infinity'::float8, 0.000001::numeric",
            &[json!("-0.00000001"), json!(10000)],
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        Value::Array(result.rows[0].clone()),
        json!(["-0.00000001", "10000", "NaN", "Infinity", "0.000001"])
    );
    assert_eq!(
        result.to_json()["columns"][0],
        json!({"name": "numeric", "type": "numeric"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_what_and_where() {
    let server = PostgresServer::start();
    server.psql("create table u (id int primary key); grant all on u to app;");
    let s = service(config(server.url()));
    let db = pg(&s);
    let query_code = |e: ServiceError| match e {
        ServiceError::Query { code, .. } => code,
        other => panic!("expected a query error, got {other:?}"),
    };
    let e = db.query("selec 1", &[], None).await.unwrap_err();
    assert_eq!(query_code(e), "42601");
    let e = db
        .query("select * from missing", &[], None)
        .await
        .unwrap_err();
    assert_eq!(query_code(e), "42P01");
    db.execute("insert into u values ($1)", &[json!(1)], None)
        .await
        .unwrap();
    let e = db
        .execute("insert into u values ($1)", &[json!(1)], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "query");
    assert_eq!(e.to_json()["code"], "23505");
    // Conversions are bad requests naming the parameter or column.
    let e = db
        .query("select $1::int4", &[json!("abc")], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "bad_request", "{e}");
    assert!(e.to_string().contains("$1"), "{e}");
    let e = db
        .query("select $1::int2", &[json!(70000)], None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = db.query("select $1::int4", &[], None).await.unwrap_err();
    assert!(
        e.to_string().contains("takes 1 parameters, 0 were given"),
        "{e}"
    );
    let e = db
        .query("select point(1, 2) as p", &[], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "bad_request");
    assert!(e.to_string().contains("column `p` has type point"), "{e}");
    // Values are never spliced into SQL.
    let evil = "x'); drop table u; --";
    let r = db
        .query("select $1::text as v", &[json!(evil)], None)
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], json!(evil));
    assert_eq!(server.psql("select count(*) from u").trim(), "1");
    assert_eq!(s.stats().calls(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_scram_as_a_managed_database_requires() {
    let server = PostgresServer::start_with(PostgresOptions {
        password: Some("s3cret pass".into()),
        tls: true,
        ..PostgresOptions::default()
    });
    let mut tls = config(server.url());
    assert!(server.url().contains("sslmode=require"), "{}", server.url());
    tls.tls_ca_file = server.ca_cert_path();
    let s = service(tls.clone());
    let r = pg(&s)
        .query(
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], json!(true));
    // Without the CA the server's certificate is not trusted.
    let mut untrusted = tls.clone();
    untrusted.tls_ca_file = None;
    let e = pg(&service(untrusted))
        .query("select 1", &[], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "{e}");
    // A wrong password is refused, as unavailable.
    let mut wrong = tls.clone();
    wrong.postgres = Some(server.url().replace("s3cret%20pass", "nope"));
    let e = pg(&service(wrong))
        .query("select 1", &[], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "{e}");
    assert!(e.to_string().contains("28P01"), "{e}");
    // The password from a file (a mounted Secret key) instead of the URL.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "s3cret pass\n").unwrap();
    let mut from_file = tls.clone();
    from_file.postgres = Some(server.url().replace(":s3cret%20pass@", "@"));
    assert!(!from_file.postgres.as_ref().unwrap().contains("s3cret"));
    from_file.password_file = Some(file);
    let r = pg(&service(from_file))
        .query("select 1", &[], None)
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], json!(1));
    // Without TLS the server (hostssl only) refuses the connection.
    let mut plain = tls;
    plain.postgres = Some(server.url().replace("sslmode=require", "sslmode=disable"));
    let e = pg(&service(plain))
        .query("select 1", &[], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "unavailable", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_statement_times_out_and_is_cancelled() {
    let server = PostgresServer::start();
    let mut c = config(server.url());
    c.timeout_ms = Some(300);
    let s = service(c);
    let started = Instant::now();
    let e = pg(&s)
        .query("select pg_sleep(5)", &[], None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "timeout", "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The server stopped running it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let active = server.psql("select count(*) from pg_stat_activity where query like 'select pg_sleep%' and state = 'active'");
        if active.trim() == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pg_sleep still running: {active}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The call's own deadline is shorter than the service's: it wins.
    let e = pg(&s)
        .query("select pg_sleep(1)", &[], Some(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("100 ms"), "{e}");
    assert_eq!(
        pg(&s).query("select 1", &[], None).await.unwrap().rows[0][0],
        json!(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_connection_is_bounded_and_no_pooling_connects_per_call() {
    let server = PostgresServer::start();
    let mut one = config(server.url());
    one.pool_size = 1;
    one.checkout_timeout_ms = Some(200);
    let s = service(one);
    let busy = {
        let s = s.clone();
        tokio::spawn(async move { pg(&s).query("select pg_sleep(1)", &[], None).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = pg(&s).query("select 1", &[], None).await.unwrap_err();
    assert_eq!(e.kind(), "unavailable");
    assert!(
        e.to_string().contains("no pooled connection came free"),
        "{e}"
    );
    busy.await.unwrap().unwrap();

    // The pool above keeps its one connection; per-call ones are closed.
    let pooled = server.app_connection_count();
    assert_eq!(pooled, 1);
    let mut none = config(server.url());
    none.pool_size = 0;
    let s = service(none);
    for _ in 0..3 {
        pg(&s).query("select 1", &[], None).await.unwrap();
    }
    assert_eq!(s.stats().connects(), 3);
    let deadline = Instant::now() + Duration::from_secs(3);
    while server.app_connection_count() != pooled {
        assert!(Instant::now() < deadline, "per-call connections stay open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_recovers_without_leaking_connections() {
    let mut server = PostgresServer::start();
    let s = service(config(server.url()));
    let load = Load::start(8, {
        let s = s.clone();
        move || {
            let s = s.clone();
            async move {
                let r = pg(&s).query("select 1", &[], None).await;
                r.map(drop).map_err(|e| e.kind().to_string())
            }
        }
    });
    load.until_more_calls(50).await;
    server.stop();
    load.until_more_failures(8).await;
    server.start_again();
    // Every call after the restart succeeds again, by itself.
    load.until_recovered(50, Duration::from_secs(10)).await;
    let outcomes = load.stop().await;
    let failed: Vec<&String> = outcomes.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!failed.is_empty(), "the server was not down under load");
    // Failures while it was down were clear, and only `unavailable`.
    assert!(failed.iter().all(|k| *k == "unavailable"), "{failed:?}");
    // No connection leaked: at most the pool's size is open.
    let open = server.app_connection_count();
    assert!(
        (1..=4).contains(&open),
        "{open} connections open for a pool of 4"
    );
}

/// As for Redis: PostgreSQL restarted while the pool's connections sit idle
/// costs no query; the first query on every pooled connection succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_query_after_a_restart_succeeds_on_every_connection() {
    let mut server = PostgresServer::start();
    let s = service(config(server.url()));
    // Four queries at once open the pool's four connections.
    let open: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { pg(&s).query("select pg_sleep(0.1)", &[], None).await })
        })
        .collect();
    for query in open {
        query.await.unwrap().unwrap();
    }
    assert_eq!(server.app_connection_count(), 4);
    server.stop();
    server.start_again();
    let after: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { pg(&s).query("select 1 as one", &[], None).await })
        })
        .collect();
    for (i, query) in after.into_iter().enumerate() {
        query
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("query {i} after the restart: {e}"));
    }
}
