//! The edges of the Extism host ABI where wasmgate once failed calls that the
//! reference runtime completes (issue 19), as plain regression tests; the
//! semantics are the reference's (the `extism` crate 1.30.0 and its kernel),
//! and `reference_sequences.rs` checks them against it. See
//! docs/extism-compatibility.md, "Edge semantics".

use wasmgate_extism::{CallError, Manifest, Plugin, PluginOptions, Runtime, RuntimeConfig};

const ENV: &str = r#"
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "load_u8" (func $load_u8 (param i64) (result i32)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
"#;

/// A plugin of `body` (WAT functions) with the imports above and helpers:
/// `$copy_input` (the input in a new block), `$text` (a block of the bytes
/// at `(offset, len)` of the module's own memory), `$output` (a block as
/// the output).
fn plugin(body: &str, manifest: &str) -> Plugin {
    plugin_named("edges", body, manifest)
}

fn plugin_named(name: &str, body: &str, manifest: &str) -> Plugin {
    let wat = format!(
        r#"(module {ENV}
  (memory (export "memory") 1)
  (data (i32.const 16) "v1value-of-v1")
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
  (func $output (param $h i64) (call $output_set (local.get $h) (call $length (local.get $h))))
  {body})"#
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edges.wat");
    std::fs::write(&path, wat).unwrap();
    let mut manifest = Manifest::from_json(manifest).unwrap();
    manifest.wasm = Manifest::from_wasm_file(&path).wasm;
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    Plugin::new(
        &runtime,
        &manifest,
        PluginOptions {
            name: Some(name.into()),
            ..PluginOptions::default()
        },
    )
    .unwrap()
}

/// The plugin log lines (target `wasmgate::plugin`) of plugin `edges-log`,
/// with INFO enabled, so that `log_info` reads its handle.
static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl tracing::Subscriber for Capture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::INFO
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String, bool);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.0 = format!("{value:?}"),
                    "plugin" => self.1 = format!("{value:?}") == "edges-log",
                    _ => {}
                }
            }
        }
        if event.metadata().target() == "wasmgate::plugin" {
            let mut fields = Fields(String::new(), false);
            event.record(&mut fields);
            if fields.1 {
                LOGGED.lock().unwrap().push(fields.0);
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Case 1: `log_info` of an empty message (`alloc(0)` is the null handle
/// 0), and `log_info(0)`: the reference logs an empty line; so does wasmgate.
#[tokio::test]
async fn logging_an_empty_message_is_fine() {
    // This thread only: the tests share one process, and the call runs here.
    let _capture = tracing::subscriber::set_default(Capture);
    let p = plugin_named(
        "edges-log",
        r#"(func (export "run") (result i32)
            (call $log_info (call $alloc (i64.const 0)))
            (call $log_info (i64.const 0))
            (call $log_info (call $copy_input))
            (i32.const 0))"#,
        "{}",
    );
    assert_eq!(p.call("run", b"last").await.unwrap(), b"");
    assert_eq!(*LOGGED.lock().unwrap(), ["", "", "last"]);
}

/// Case 2: `config_get(0)` looks up the key "" (the null handle is an
/// empty string): no such key gives 0, a config that has it gives its value.
#[tokio::test]
async fn config_get_of_the_null_handle_is_the_empty_key() {
    let body = r#"(func (export "run") (result i32) (local $v i64)
        (local.set $v (call $config_get (i64.const 0)))
        (if (i64.ne (local.get $v) (i64.const 0)) (then (call $output (local.get $v))))
        (i32.const 0))"#;
    assert_eq!(plugin(body, "{}").call("run", b"").await.unwrap(), b"");
    let with_empty_key = plugin(body, r#"{"config": {"": "the empty key's value"}}"#);
    assert_eq!(
        with_empty_key.call("run", b"").await.unwrap(),
        b"the empty key's value"
    );
}

/// Case 3: `var_set(k, v)` frees `k` (the callee owns the handles it is
/// given); a second `var_set(k, 0)` with the same, now freed, handle fails
/// the call, as in the `extism` crate ("invalid handle offset for var key").
/// The Go SDK reads a freed handle as the empty string instead: there the
/// call "works", but removes the var "" and leaves `k`'s value in place, so
/// wasmgate keeps the crate's error. With a new key block the var is removed.
#[tokio::test]
async fn a_freed_key_handle_is_an_error_and_a_new_one_removes_the_var() {
    let p = plugin(
        r#"(func (export "set_then_remove_with_the_same_handle") (result i32) (local $k i64)
            (local.set $k (call $text (i32.const 16) (i32.const 2)))
            (call $var_set (local.get $k) (call $text (i32.const 18) (i32.const 11)))
            (call $var_set (local.get $k) (i64.const 0))
            (drop (call $var_get (local.get $k)))
            (i32.const 0))
          (func (export "get") (result i32) (local $v i64)
            (local.set $v (call $var_get (call $text (i32.const 16) (i32.const 2))))
            (if (i64.ne (local.get $v) (i64.const 0)) (then (call $output (local.get $v))))
            (i32.const 0))
          (func (export "remove") (result i32)
            (call $var_set (call $text (i32.const 16) (i32.const 2)) (i64.const 0))
            (i32.const 0))"#,
        "{}",
    );
    let err = p
        .call("set_then_remove_with_the_same_handle", b"")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "host_error", "{err}");
    assert!(
        err.to_string()
            .contains("invalid handle offset for var key"),
        "{err}"
    );
    // The first var_set went through; the failed removal changed nothing.
    assert_eq!(p.call("get", b"").await.unwrap(), b"value-of-v1");
    assert_eq!(p.call("remove", b"").await.unwrap(), b"");
    assert_eq!(p.call("get", b"").await.unwrap(), b"");
}

/// Case 4: `input_load_u64(0)` on a 3-byte input is 0, as in the kernel: a
/// u64 load returns 0 unless all 8 bytes are input; `input_load_u8` past
/// the end is 0 too. PDKs read the tail with `input_load_u8`.
#[tokio::test]
async fn reads_past_the_input_return_zero() {
    let p = plugin(
        r#"(func (export "run") (result i32) (local $h i64)
            (local.set $h (call $alloc (i64.const 32)))
            (call $store_u64 (local.get $h) (call $input_load_u64 (i64.const 0)))
            (call $store_u8 (i64.add (local.get $h) (i64.const 8)) (call $input_load_u8 (i64.const 2)))
            (call $store_u8 (i64.add (local.get $h) (i64.const 9)) (call $input_load_u8 (i64.const 3)))
            (call $store_u64 (i64.add (local.get $h) (i64.const 10))
              (call $input_load_u64 (i64.const -1)))
            (call $output_set (local.get $h) (i64.const 18))
            (i32.const 0))"#,
        "{}",
    );
    let mut expected = vec![0u8; 18];
    expected[8] = b'z';
    assert_eq!(p.call("run", b"xyz").await.unwrap(), expected);
    // With 8 bytes or more, the word is the input's.
    let out = p.call("run", b"abcdefghij").await.unwrap();
    assert_eq!(&out[..9], b"abcdefghc");
}

/// A freed handle stays invalid while the memory has room (the kernel bumps
/// and reuses freed blocks only when it would otherwise grow).
#[tokio::test]
async fn freed_handles_stay_freed_while_there_is_room() {
    let p = plugin(
        r#"(func (export "run") (result i32) (local $a i64) (local $b i64) (local $out i64)
            (local.set $a (call $copy_input))
            (call $free (local.get $a))
            (local.set $b (call $alloc (call $input_length)))
            (local.set $out (call $alloc (i64.const 2)))
            (call $store_u8 (local.get $out) (i64.ne (local.get $a) (local.get $b)))
            (call $store_u8 (i64.add (local.get $out) (i64.const 1))
              (i32.wrap_i64 (call $length (local.get $a))))
            (call $output_set (local.get $out) (i64.const 2))
            (i32.const 0))"#,
        "{}",
    );
    assert_eq!(p.call("run", b"some input").await.unwrap(), [1, 0]);
}

/// A new block reads as zeros, even where an earlier call of the same
/// (pooled) instance left bytes: the kernel zeroes what a call used, so a
/// plugin that outputs more than it wrote never shows an earlier request's
/// data.
#[tokio::test]
async fn new_blocks_read_as_zeros_after_an_earlier_call() {
    let p = plugin(
        r#"(func (export "fill") (result i32) (local $h i64) (local $i i64)
            (local.set $h (call $alloc (i64.const 64)))
            (block $done (loop $next
              (br_if $done (i64.ge_u (local.get $i) (i64.const 64)))
              (call $store_u64 (i64.add (local.get $h) (local.get $i)) (i64.const -1))
              (local.set $i (i64.add (local.get $i) (i64.const 8)))
              (br $next)))
            (call $output_set (local.get $h) (i64.const 64))
            (i32.const 0))
          (func (export "fresh") (result i32) (local $h i64)
            (local.set $h (call $alloc (i64.const 64)))
            (call $output_set (local.get $h) (i64.const 64))
            (i32.const 0))"#,
        "{}",
    );
    assert_eq!(p.call("fill", b"").await.unwrap(), [0xff; 64]);
    assert_eq!(p.call("fresh", b"").await.unwrap(), [0; 64]);
    assert_eq!(p.call("fill", b"").await.unwrap(), [0xff; 64]);
    assert_eq!(p.call("fresh", b"x").await.unwrap(), [0; 64]);
    assert_eq!(p.status().pool.created, 1, "one instance served every call");
    match p.call("nope", b"").await {
        Err(CallError::FunctionNotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
}
