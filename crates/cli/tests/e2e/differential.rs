//! Differential tests: the same plugins and inputs through `wasmgate call`
//! and through the official `extism` crate (reference/extism-ref, built by
//! `make reference`). Outputs must be byte-identical; errors must be of the
//! same class, and where the reference's message is the plugin's own (or a
//! fixed text), identical.

use crate::common::plugin;
use crate::common::reference::run_both;
use serde_json::Value;

/// The reference's error, classified like wasmgate's `kind`. The SDK shows
/// host-function failures and traps alike ("error while executing at wasm
/// backtrace"), so the class comes from the whole chain: a trap names a
/// "wasm trap", a host function's error is the last link.
fn reference_kind(display: &str, chain: &str) -> &'static str {
    if display.starts_with("Function not found") {
        "function_not_found"
    } else if display == "timeout" {
        "timeout"
    } else if display == "oom" {
        "out_of_memory"
    } else if chain.contains("exit status") {
        "plugin_exit"
    } else if chain.contains("wasm trap") {
        "trap"
    } else if chain.contains("wasm backtrace") {
        "host_error"
    } else {
        "plugin_error"
    }
}

fn assert_same(plugin_path: &str, function: &str, flags: &[&str]) -> Vec<Value> {
    let (ours, theirs) = run_both(plugin_path, function, flags);
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(&theirs) {
        let context = format!("{function} {flags:?}\n  wasmgate: {o}\n  extism:   {t}");
        assert_eq!(o["ok"], t["ok"], "{context}");
        if o["ok"] == true {
            assert_eq!(
                o["output_b64"], t["output_b64"],
                "outputs differ: {context}"
            );
        } else {
            let (display, chain) = (
                t["error"].as_str().unwrap(),
                t["error_chain"].as_str().unwrap(),
            );
            let kind = reference_kind(display, chain);
            assert_eq!(o["kind"], kind, "error classes differ: {context}");
            let ours = o["error"].as_str().unwrap();
            match kind {
                "plugin_error" => assert_eq!(ours, display, "messages differ: {context}"),
                // The reference's message, then the functions that exist.
                "function_not_found" => assert!(
                    ours.starts_with(display) && ours.contains("(the plugin exports"),
                    "messages differ: {context}"
                ),
                // The host function's (or WASI exit's) own message ends the reference's chain.
                "host_error" | "plugin_exit" => {
                    let message = chain.rsplit(": ").next().unwrap();
                    assert!(ours.contains(message), "messages differ: {context}");
                }
                _ => {}
            }
        }
    }
    ours
}

fn p(name: &str) -> String {
    plugin(name).to_str().unwrap().to_string()
}

#[test]
fn hello_rust_and_go() {
    for plugin in [p("hello"), p("go_hello")] {
        for input in [
            "John Doe",
            "",
            "quote \" and \\ backslash",
            "ünïcödé ✓",
            &"long ".repeat(5000),
        ] {
            assert_same(&plugin, "hello", &["--input", input]);
        }
        assert_same(&plugin, "no_such_export", &[]);
    }
}

#[test]
fn vars_and_config_across_repeated_calls() {
    for plugin in [p("count_vowels"), p("go_hello")] {
        let ours = assert_same(
            &plugin,
            "count_vowels",
            &["--input", "Hello World", "--repeat", "3"],
        );
        assert_eq!(ours.len(), 3);
        assert_same(
            &plugin,
            "count_vowels",
            &[
                "--input",
                "Hello World",
                "--config",
                "vowels=lo",
                "--repeat",
                "2",
            ],
        );
    }
    let caps = p("capabilities");
    assert_same(&caps, "var_roundtrip", &["--input", "color=blue"]);
    assert_same(&caps, "var_get", &["--input", "unset"]);
    assert_same(
        &caps,
        "config",
        &["--input", "greeting", "--config", "greeting=hello there"],
    );
    assert_same(&caps, "config", &["--input", "missing"]);
    assert_same(
        &caps,
        "var_roundtrip",
        &["--input", "k=v", "--max-var-bytes", "0"],
    );
}

#[test]
fn binary_payloads_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.bin");
    let bytes: Vec<u8> = (0..300_007u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&input, bytes).unwrap();
    let bench = p("bench");
    assert_same(&bench, "echo", &["--input-file", input.to_str().unwrap()]);
    assert_same(
        &bench,
        "consume",
        &["--input-file", input.to_str().unwrap()],
    );
    assert_same(&bench, "noop", &[]);
}

#[test]
fn plugin_errors_and_return_codes() {
    let caps = p("capabilities");
    assert_same(&caps, "fail", &["--input", "it went wrong"]);
    assert_same(&caps, "exit_code", &[]);
    assert_same(&caps, "log", &["--input", "a line"]);
}

#[test]
fn traps_timeouts_memory_and_exits() {
    let faults = p("faults");
    assert_same(&faults, "trap", &["--input", "x"]);
    assert_same(&faults, "trap_sometimes", &["--input", "7"]);
    assert_same(&faults, "trap_sometimes", &["--input", "30"]);
    assert_same(&faults, "spin", &["--timeout-ms", "300"]);
    assert_same(&faults, "grow", &["--memory-limit", "32"]);
    assert_same(&faults, "exit_three", &[]);
    assert_same(&faults, "exit_zero", &[]);
    assert_same(&faults, "stdout", &["--input", "hi"]);
}

#[test]
fn http_allow_list_and_requests() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in upstream.incoming() {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = "upstream says hi";
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-upstream: yes\r\nconnection: close\r\n\r\n{body}", body.len());
        }
    });
    let caps = p("capabilities");
    let url = format!("http://127.0.0.1:{port}/hello");
    // Allowed: status and body must match (headers differ by runtime, e.g. none vs date).
    let (ours, theirs) = run_both(
        &caps,
        "http_get",
        &["--input", &url, "--allow-host", "127.0.0.1"],
    );
    let decode = |v: &Value| -> Value {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["output_b64"].as_str().unwrap())
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    let (o, t) = (decode(&ours[0]), decode(&theirs[0]));
    assert_eq!(o["status"], 200);
    assert_eq!((&o["status"], &o["body"]), (&t["status"], &t["body"]));
    assert_eq!(o["headers"]["x-upstream"], t["headers"]["x-upstream"]);
    // Larger than max_http_response_bytes: both refuse.
    assert_same(
        &caps,
        "http_get",
        &[
            "--input",
            &url,
            "--allow-host",
            "127.0.0.1",
            "--max-http-response-bytes",
            "5",
        ],
    );
    // Not on the list: both refuse.
    assert_same(
        &caps,
        "http_get",
        &["--input", &url, "--allow-host", "example.com"],
    );
    assert_same(&caps, "http_get", &["--input", &url]);
}

/// The edges issue 19 found, and their neighbours, in a hand-written module
/// (docs/extism-compatibility.md, "Edge semantics"; the generated sequences
/// of `crates/extism/tests/reference_sequences.rs` cover the rest).
const EDGES: &str = r#"(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "v1value")
  (func $copy_input (result i64) (local $n i64) (local $i i64) (local $h i64)
    (local.set $n (call $input_length))
    (local.set $h (call $alloc (local.get $n)))
    (block $done (loop $next
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $h) (local.get $i)) (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $next)))
    (local.get $h))
  (func $text (param $at i32) (param $n i32) (result i64) (local $h i64) (local $i i32)
    (local.set $h (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $h) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (local.get $at) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (local.get $h))
  (func (export "log_empty") (result i32)
    (call $log_info (call $alloc (i64.const 0)))
    (call $log_info (i64.const 0))
    (i32.const 0))
  (func (export "config_null") (result i32) (local $v i64)
    (local.set $v (call $config_get (i64.const 0)))
    (call $output_set (local.get $v) (call $length (local.get $v)))
    (i32.const 0))
  (func (export "var_same_key") (result i32) (local $k i64)
    (local.set $k (call $text (i32.const 16) (i32.const 2)))
    (call $var_set (local.get $k) (call $text (i32.const 18) (i32.const 5)))
    (call $var_set (local.get $k) (i64.const 0))
    (drop (call $var_get (local.get $k)))
    (i32.const 0))
  (func (export "input_short") (result i32) (local $h i64)
    (local.set $h (call $alloc (i64.const 9)))
    (call $store_u64 (local.get $h) (call $input_load_u64 (i64.const 0)))
    (call $store_u8 (i64.add (local.get $h) (i64.const 8)) (call $input_load_u8 (i64.const 3)))
    (call $output_set (local.get $h) (i64.const 9))
    (i32.const 0))
  (func (export "freed_output") (result i32) (local $h i64)
    (local.set $h (call $copy_input))
    (call $free (local.get $h))
    (call $output_set (local.get $h) (call $input_length))
    (i32.const 0))
  (func (export "store_past_block") (result i32) (local $h i64)
    (local.set $h (call $alloc (i64.const 4)))
    (call $store_u64 (local.get $h) (i64.const 0x4847464544434241))
    (call $output_set (local.get $h) (i64.const 4))
    (i32.const 0)))"#;

#[test]
fn edge_cases_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edges.wat");
    std::fs::write(&path, EDGES).unwrap();
    let edges = path.to_str().unwrap();
    let out = |v: &Value| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(v["output_b64"].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(out(&assert_same(edges, "log_empty", &[])[0]), b"");
    assert_eq!(out(&assert_same(edges, "config_null", &[])[0]), b"");
    let with_empty_key = assert_same(edges, "config_null", &["--config", "=the empty key's"]);
    assert_eq!(out(&with_empty_key[0]), b"the empty key's");
    // The key handle was freed by the first var_set: both fail the call
    // (the handles in the messages differ: 64 here, 77 in the reference).
    let (ours, theirs) = run_both(edges, "var_same_key", &[]);
    assert_eq!(ours[0]["kind"], "host_error");
    let chain = theirs[0]["error_chain"].as_str().unwrap();
    assert!(
        chain.ends_with("invalid handle offset for var key: 77"),
        "{chain}"
    );
    assert!(ours[0]["error"]
        .as_str()
        .unwrap()
        .contains("invalid handle offset for var key: 64"));
    assert_eq!(
        out(&assert_same(edges, "input_short", &["--input", "xyz"])[0]),
        [0; 9]
    );
    assert_eq!(
        out(&assert_same(edges, "input_short", &["--input", "abcdefghi"])[0]),
        b"abcdefghd"
    );
    assert_eq!(
        out(&assert_same(edges, "freed_output", &["--input", "stale but there"])[0]),
        b"stale but there"
    );
    // The AssemblyScript PDK writes past its block; the output is the block.
    assert_eq!(
        out(&assert_same(edges, "store_past_block", &[])[0]),
        b"ABCD"
    );
}
