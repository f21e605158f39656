//! `wasmgate serve` over real HTTP with plugins built from source.

use std::time::{Duration, Instant};

use crate::common::{client, plugin, post, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_over_http() {
    let server = Server::start(&[plugin("hello").to_str().unwrap(), "hello"]);
    let c = client();
    let reply = post(&c, &server.url("/"), "John Doe").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), r#"{"message":"Hello John Doe"}"#);
    assert_eq!(reply.headers["content-type"], "application/json");
    // Any path names a function too.
    let reply = post(&c, &server.url("/hello"), "Ada").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Ada"}"#);
    // The reserved health path answers without calling the plugin.
    let reply = crate::common::gateway::get(&c, &server.url("/.well-known/wasmgate/health")).await;
    assert_eq!((reply.status, reply.text().as_str()), (200, "ok\n"));
    let reply = post(&c, &server.url("/missing"), "x").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["kind"], "function_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_parallel_requests_are_all_correct() {
    let server = Server::start(&[
        plugin("hello").to_str().unwrap(),
        "hello",
        "--pool-size",
        "16",
    ]);
    let c = client();
    let url = server.url("/");
    let requests: Vec<_> = (0..1000)
        .map(|i| {
            let c = c.clone();
            let url = url.clone();
            tokio::spawn(async move { (i, post(&c, &url, format!("caller {i}")).await) })
        })
        .collect();
    for request in requests {
        let (i, reply) = request.await.unwrap();
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
        assert_eq!(reply.text(), format!(r#"{{"message":"Hello caller {i}"}}"#));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_plugin_serves_the_same_answer() {
    let server = Server::start(&[plugin("go_hello").to_str().unwrap(), "hello"]);
    let c = client();
    let reply = post(&c, &server.url("/"), "John Doe").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), r#"{"message":"Hello John Doe"}"#);
    let reply = post(&c, &server.url("/count_vowels"), "Hello World").await;
    assert_eq!(reply.json()["count"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_map_to_status_codes_and_the_server_keeps_serving() {
    let faults = plugin("faults");
    let server = Server::start(&[
        faults.to_str().unwrap(),
        "--timeout-ms",
        "300",
        "--memory-limit",
        "32",
    ]);
    let c = client();

    let trap = post(&c, &server.url("/trap"), "x").await;
    assert_eq!(trap.status, 500);
    let error = &trap.json()["error"];
    assert_eq!(error["kind"], "trap");
    assert_eq!(error["plugin"], "faults");
    assert_eq!(error["function"], "trap");
    let frames = error["backtrace"].as_array().unwrap();
    let origin = frames
        .iter()
        .find(|f| {
            f["function"]
                .as_str()
                .unwrap_or("")
                .contains("explode_on_purpose")
        })
        .unwrap_or_else(|| panic!("no explode_on_purpose frame in {frames:?}"));
    assert!(
        origin["file"].as_str().unwrap().ends_with("lib.rs"),
        "{origin}"
    );
    assert!(origin["line"].as_u64().unwrap() > 0);

    let started = Instant::now();
    let spin = post(&c, &server.url("/spin"), "").await;
    assert_eq!(spin.status, 504, "{}", spin.text());
    assert_eq!(spin.json()["error"]["kind"], "timeout");
    assert!(started.elapsed() < Duration::from_secs(5));

    let grow = post(&c, &server.url("/grow"), "").await;
    assert_eq!(grow.status, 500, "{}", grow.text());
    assert_eq!(grow.json()["error"]["kind"], "out_of_memory");

    let exit = post(&c, &server.url("/exit_three"), "").await;
    assert_eq!(exit.status, 500);
    assert_eq!(exit.json()["error"]["kind"], "plugin_exit");
    assert_eq!(
        exit.json()["error"]["message"],
        "Exited with i32 exit status 3"
    );

    let bye = post(&c, &server.url("/exit_zero"), "").await;
    assert_eq!((bye.status, bye.text().as_str()), (200, "bye"));

    for n in 1..=20 {
        let reply = post(&c, &server.url("/trap_sometimes"), n.to_string()).await;
        if n % 10 == 0 {
            assert_eq!(reply.status, 500);
        } else {
            assert_eq!((reply.status, reply.text()), (200, format!("ok {n}")));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_errors_and_exit_codes() {
    let server = Server::start(&[
        plugin("capabilities").to_str().unwrap(),
        "--config",
        "greeting=hi",
    ]);
    let c = client();
    let fail = post(&c, &server.url("/fail"), "the input was wrong").await;
    assert_eq!(fail.status, 500);
    assert_eq!(fail.json()["error"]["kind"], "plugin_error");
    assert_eq!(fail.json()["error"]["message"], "the input was wrong");
    let code = post(&c, &server.url("/exit_code"), "").await;
    assert_eq!(
        code.json()["error"]["message"],
        "Returned non-zero exit code: 7"
    );
    let config = post(&c, &server.url("/config"), "greeting").await;
    assert_eq!((config.status, config.text().as_str()), (200, "hi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_is_413() {
    let server = Server::start(&[
        plugin("hello").to_str().unwrap(),
        "hello",
        "--max-body-bytes",
        "1000",
    ]);
    let c = client();
    let reply = post(&c, &server.url("/"), vec![b'a'; 5000]).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json()["error"]["kind"], "body_too_large");
    assert_eq!(post(&c, &server.url("/"), "small").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_pool_answers_503_after_a_bounded_wait() {
    let server = Server::start(&[
        plugin("faults").to_str().unwrap(),
        "--pool-size",
        "1",
        "--queue-timeout-ms",
        "100",
    ]);
    let c = client();
    let busy = {
        let (c, url) = (c.clone(), server.url("/sleep_ms"));
        tokio::spawn(async move { post(&c, &url, "3000").await })
    };
    // Until the busy call holds the only instance, a short call succeeds;
    // then it is refused after the bounded wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (rejected, took) = loop {
        let started = Instant::now();
        let reply = post(&c, &server.url("/sleep_ms"), "1").await;
        if reply.status != 200 {
            break (reply, started.elapsed());
        }
        assert!(
            Instant::now() < deadline,
            "the busy call never held the instance"
        );
    };
    assert_eq!(rejected.status, 503, "{}", rejected.text());
    assert_eq!(rejected.json()["error"]["kind"], "overloaded");
    assert!(rejected.headers.contains_key("retry-after"));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(busy.await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_requests() {
    // One instance, so that the request in flight is observable: a probe is
    // refused (503) while it holds the instance.
    let mut server = Server::start(&[
        plugin("faults").to_str().unwrap(),
        "--pool-size",
        "1",
        "--queue-timeout-ms",
        "20",
    ]);
    let c = client();
    let in_flight = {
        let (c, url) = (c.clone(), server.url("/sleep_ms"));
        tokio::spawn(async move { post(&c, &url, "700").await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while post(&c, &server.url("/sleep_ms"), "0").await.status != 503 {
        assert!(Instant::now() < deadline, "the request never started");
    }
    server.terminate();
    let reply = in_flight.await.unwrap();
    assert_eq!((reply.status, reply.text().as_str()), (200, "slept"));
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}

/// An Extism plugin that counts its calls in a global of its instance (as
/// any module's own state is kept) and answers the count, `1` to `9`.
const CALLS: &str = r#"(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (global $calls (mut i32) (i32.const 0))
  (func (export "calls") (result i32)
    (local $at i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (local.set $at (call $alloc (i64.const 1)))
    (call $store_u8 (local.get $at) (i32.add (i32.const 48) (global.get $calls)))
    (call $output_set (local.get $at) (i64.const 1))
    (i32.const 0))
)"#;

/// `--isolation` promises a fresh instance for every request, nothing shared
/// between requests: a module's own state starts anew each time. The same
/// plugin on one reused instance shows what sharing looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_mode_serves_correctly() {
    let server = Server::start(&[plugin("hello").to_str().unwrap(), "hello", "--isolation"]);
    let c = client();
    for i in 0..20 {
        let reply = post(&c, &server.url("/"), format!("n{i}")).await;
        assert_eq!(reply.text(), format!(r#"{{"message":"Hello n{i}"}}"#));
    }

    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.wat");
    std::fs::write(&calls, CALLS).unwrap();
    let calls = calls.to_str().unwrap();
    let counts = |server: Server| async move {
        let mut counts = String::new();
        for _ in 0..5 {
            let reply = post(&client(), &server.url("/"), "").await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            counts += &reply.text();
        }
        counts
    };
    let reused = Server::start(&[calls, "calls", "--pool-size", "1"]);
    assert_eq!(counts(reused).await, "12345", "one instance, reused");
    let isolated = Server::start(&[calls, "calls", "--pool-size", "1", "--isolation"]);
    assert_eq!(
        counts(isolated).await,
        "11111",
        "a fresh instance each time"
    );
}

#[test]
fn broken_plugins_fail_at_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"definitely not wasm").unwrap();
    let out = crate::common::wasmgate()
        .args(["serve", bad.to_str().unwrap(), "hello"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a WebAssembly module"));

    let out = crate::common::wasmgate()
        .args([
            "serve",
            plugin("hello").to_str().unwrap(),
            "no_such_function",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no callable export `no_such_function`"));

    let manifest = dir.path().join("m.json");
    std::fs::write(
        &manifest,
        r#"{"wasm":[{"path":"x.wasm"}],"memory":{"max_pagez":3}}"#,
    )
    .unwrap();
    let out = crate::common::wasmgate()
        .args(["serve", manifest.to_str().unwrap(), "hello"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("memory") && stderr.contains("max_pagez"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_before_the_call_name_the_plugin_and_function() {
    let server = Server::start(&[
        plugin("hello").to_str().unwrap(),
        "hello",
        "--max-body-bytes",
        "16",
    ]);
    let c = client();
    let reply = post(&c, &server.url("/hello"), "x".repeat(100)).await;
    assert_eq!(reply.status, 413);
    let error = &reply.json()["error"];
    assert_eq!(error["kind"], "body_too_large");
    assert_eq!(error["plugin"], "hello");
    assert_eq!(error["function"], "hello");
    assert!(error["message"].as_str().unwrap().contains("16 bytes"));
}
