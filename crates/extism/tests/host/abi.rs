//! The Extism host ABI driven by hand-written modules: the paths a PDK never
//! takes on purpose (hostile offsets, traps, runaway loops and allocations).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgate_extism::{
    CallError, Manifest, Plugin, PluginOptions, PoolConfig, Runtime, RuntimeConfig,
};

const ENV: &str = r#"
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "load_u64" (func $load_u64 (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
"#;

/// A module with the imports above and `body` (functions in WAT).
fn module(body: &str) -> String {
    module_with_imports("", body)
}

/// Like [`module`], with more imports (they must precede the definitions).
fn module_with_imports(imports: &str, body: &str) -> String {
    format!(
        r#"(module {ENV} {imports}
  (memory (export "memory") 1)
  ;; copies the input byte by byte into a new block and returns its handle
  (func $copy_input (result i64) (local $n i64) (local $i i64) (local $h i64)
    (local.set $n (call $input_length))
    (local.set $h (call $alloc (local.get $n)))
    (block $done (loop $next
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $h) (local.get $i)) (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $next)))
    (local.get $h))
  {body})"#
    )
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).unwrap()
}

fn plugin_with(runtime: &Runtime, wat: &str, manifest_json: &str, pool: PoolConfig) -> Plugin {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugin.wat");
    std::fs::write(&path, wat).unwrap();
    let mut manifest = Manifest::from_json(manifest_json).unwrap();
    manifest.wasm = Manifest::from_wasm_file(&path).wasm;
    let plugin = Plugin::new(
        runtime,
        &manifest,
        PluginOptions {
            name: Some("abi-test".into()),
            pool,
            host_functions: vec![],
            ..PluginOptions::default()
        },
    )
    .unwrap();
    drop(dir);
    plugin
}

fn plugin(wat: &str) -> Plugin {
    plugin_with(&runtime(), wat, "{}", PoolConfig::default())
}

const ECHO: &str = r#"(func (export "echo") (result i32) (local $h i64)
    (local.set $h (call $copy_input))
    (call $output_set (local.get $h) (call $input_length))
    (i32.const 0))"#;

#[tokio::test]
async fn echo_roundtrip_and_empty_input() {
    let p = plugin(&module(ECHO));
    assert_eq!(p.call("echo", b"hello").await.unwrap(), b"hello");
    assert_eq!(p.call("echo", b"").await.unwrap(), b"");
    let big = vec![7u8; 100_000];
    assert_eq!(p.call("echo", &big).await.unwrap(), big);
}

#[tokio::test]
async fn error_set_becomes_the_plugin_error() {
    let p = plugin(&module(
        r#"(func (export "fail") (result i32)
            (call $error_set (call $copy_input))
            (i32.const 1))
           (func (export "rc") (result i32) (i32.const 7))"#,
    ));
    match p.call("fail", b"it broke").await {
        Err(CallError::Plugin(msg)) => assert_eq!(msg, "it broke"),
        other => panic!("{other:?}"),
    }
    let err = p.call("rc", b"").await.unwrap_err();
    assert_eq!(err.to_string(), "Returned non-zero exit code: 7");
    assert_eq!(
        p.status().pool.discarded,
        0,
        "plugin errors do not discard the instance"
    );
}

#[tokio::test]
async fn a_crash_after_an_error_set_is_still_reported() {
    let p = plugin(&module(
        r#"(func (export "fail_then_trap") (result i32)
            (call $error_set (call $copy_input))
            unreachable)"#,
    ));
    // The caller sees the plugin's error, as with the reference runtime...
    match p.call("fail_then_trap", b"it broke").await {
        Err(CallError::Plugin(msg)) => assert_eq!(msg, "it broke"),
        other => panic!("{other:?}"),
    }
    // ...and the trap is counted and reported, and the instance is not reused.
    assert_eq!(p.stats().snapshot().traps, 1);
    let crash = p.stats().last_crash().expect("a crash report");
    assert_eq!(crash.report.function, "fail_then_trap");
    assert_eq!(crash.report.kind.as_str(), "trap");
    assert_eq!(p.status().pool.discarded, 1);
}

#[tokio::test]
async fn missing_function_and_bad_signature() {
    let p = plugin(&module(
        r#"(func (export "takes_arg") (param i32) (result i32) (i32.const 0))"#,
    ));
    assert_eq!(
        p.call("nope", b"").await.unwrap_err().to_string(),
        "Function not found: nope (the plugin exports no function that can be called)"
    );
    assert!(matches!(
        p.call("takes_arg", b"").await,
        Err(CallError::BadSignature { .. })
    ));
    assert!(!p.function_exists("takes_arg"));
}

/// Offsets outside Extism memory are the reference kernel's: loads give 0,
/// stores and `output_set` are ignored, and nothing reaches the header the
/// host keeps below offset 64; a handle a host function cannot read fails
/// only the call.
#[tokio::test]
async fn hostile_offsets_are_ignored_or_fail_only_the_call() {
    let p = plugin(&module(&format!(
        r#"{ECHO}
        (func (export "load_far") (result i32) (i32.wrap_i64 (call $load_u64 (i64.const -4))))
        (func (export "load_header") (result i32) (i32.wrap_i64 (call $load_u64 (i64.const 16))))
        (func (export "store_header_then_echo") (result i32)
          (call $store_u64 (i64.const 8) (i64.const 0))
          (call $store_u64 (i64.const 16) (i64.const -1))
          (call $store_u64 (i64.const 24) (i64.const -1))
          (call $store_u8 (i64.const 63) (i32.const 1))
          (call $store_u64 (i64.const 1099511627776) (i64.const 1))
          (call $store_u64 (i64.const -8) (i64.const 1))
          (call $output_set (call $copy_input) (call $input_length))
          (i32.const 0))
        (func (export "output_bogus") (result i32) (local $h i64)
          (local.set $h (call $copy_input))
          (call $output_set (local.get $h) (call $input_length))
          (call $output_set (i64.const -1) (i64.const 16))
          (call $output_set (local.get $h) (i64.const -1))
          (call $output_set (i64.const 0) (i64.const 0))
          (i32.const 0))
        (func (export "input_far") (result i32) (call $input_load_u8 (i64.const 1099511627776)))
        (func (export "config_bad") (result i32) (drop (call $config_get (i64.const 999999999))) (i32.const 0))
        (func (export "free_garbage") (result i32) (call $free (i64.const 987654321)) (call $free (i64.const 0)) (i32.const 0))
        (func (export "length_garbage") (result i32) (i32.wrap_i64 (call $length (i64.const 12345678))))
        (func (export "alloc_huge") (result i32) (i32.wrap_i64 (call $alloc (i64.const 1099511627776))))
        (func (export "error_bogus") (result i32) (call $error_set (i64.const 1099511627776)) (i32.const 1))"#
    )));
    for f in ["load_far", "load_header", "input_far"] {
        assert_eq!(p.call(f, b"x").await.unwrap(), b"", "{f} returned 0");
    }
    assert_eq!(
        p.call("store_header_then_echo", b"intact").await.unwrap(),
        b"intact",
        "stores outside the data region are ignored; the header is intact"
    );
    assert_eq!(
        p.call("output_bogus", b"kept").await.unwrap(),
        b"kept",
        "output_set outside Extism memory is ignored"
    );
    let err = p.call("config_bad", b"x").await.unwrap_err();
    assert_eq!(err.kind(), "host_error", "{err}");
    let report = err.crash_report().unwrap();
    assert_eq!(report.function, "config_bad");
    assert_eq!(report.plugin, "abi-test");
    assert!(
        report
            .message
            .contains("invalid handle offset for config key: 999999999"),
        "{}",
        report.message
    );
    assert_eq!(p.call("free_garbage", b"").await.unwrap(), b"");
    assert_eq!(
        p.call("length_garbage", b"").await.unwrap(),
        b"",
        "length of garbage is 0"
    );
    assert_eq!(
        p.call("alloc_huge", b"").await.unwrap(),
        b"",
        "huge alloc returns 0"
    );
    // An error handle outside Extism memory is ignored: the return code decides.
    assert_eq!(
        p.call("error_bogus", b"").await.unwrap_err().to_string(),
        "Returned non-zero exit code: 1"
    );
    // And the plugin still serves.
    assert_eq!(p.call("echo", b"still here").await.unwrap(), b"still here");
    assert_eq!(
        p.status().pool.discarded,
        1,
        "only the failed call's instance is discarded"
    );
}

#[tokio::test]
async fn trap_discards_instance_and_reports_function() {
    let p = plugin(&module(&format!(
        r#"{ECHO}
        (global $calls (mut i32) (i32.const 0))
        (func $boom unreachable)
        (func (export "trap") (result i32) (call $boom) (i32.const 0))
        (func (export "count") (result i32) (local $h i64)
          (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
          (local.set $h (call $alloc (i64.const 1)))
          (call $store_u8 (local.get $h) (i32.add (i32.const 48) (global.get $calls)))
          (call $output_set (local.get $h) (i64.const 1))
          (i32.const 0))"#
    )));
    assert_eq!(p.call("count", b"").await.unwrap(), b"1");
    assert_eq!(
        p.call("count", b"").await.unwrap(),
        b"2",
        "pooled instance keeps its state"
    );
    let err = p.call("trap", b"").await.unwrap_err();
    assert_eq!(err.kind(), "trap");
    let report = err.crash_report().unwrap();
    assert!(report.message.contains("unreachable"), "{}", report.message);
    assert!(
        report.frames.iter().any(|f| f.function == "boom"),
        "{report}"
    );
    // The instance that trapped is gone; the next call starts from a clean one.
    assert_eq!(p.call("count", b"").await.unwrap(), b"1");
}

#[tokio::test]
async fn runaway_loop_times_out_without_blocking_others() {
    let rt = runtime();
    let p = Arc::new(plugin_with(
        &rt,
        &module(&format!(
            r#"{ECHO} (func (export "spin") (result i32) (loop $l (br $l)) (i32.const 0))"#
        )),
        r#"{"timeout_ms": 1000}"#,
        PoolConfig::default(),
    ));
    let started = Instant::now();
    let spinning = {
        let p = p.clone();
        tokio::spawn(async move { p.call("spin", b"").await })
    };
    // The spinning call yields between time slices, so on this same
    // single-threaded test runtime another call completes while it spins.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(p.call("echo", b"meanwhile").await.unwrap(), b"meanwhile");
    assert!(
        !spinning.is_finished(),
        "the echo finished while the loop was still running"
    );
    let err = spinning.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), "timeout");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1000) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn memory_cap_stops_growth() {
    let rt = runtime();
    let p = plugin_with(
        &rt,
        &module(&format!(
            r#"{ECHO}
            (func (export "grow") (result i32)
              (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
              (i32.const 0))"#
        )),
        r#"{"memory": {"max_pages": 64}}"#,
        PoolConfig::default(),
    );
    let err = p.call("grow", b"").await.unwrap_err();
    assert_eq!(err.kind(), "out_of_memory", "{err}");
    assert_eq!(p.call("echo", b"ok").await.unwrap(), b"ok");
    // Extism memory is capped too: an input larger than the cap is refused up front.
    let too_big = vec![0u8; 64 * 65536 + 1];
    assert_eq!(
        p.call("echo", &too_big).await.unwrap_err().kind(),
        "input_too_large"
    );
}

#[tokio::test]
async fn extism_memory_has_its_own_cap_beside_linear_memory() {
    // The module's memory is exactly at the cap (1 page); Extism memory (the
    // input and output blocks) is capped separately, as in the reference runtime.
    let p = plugin_with(
        &runtime(),
        &module(ECHO),
        r#"{"memory": {"max_pages": 1}}"#,
        PoolConfig::default(),
    );
    let input = vec![5u8; 30_000];
    assert_eq!(p.call("echo", &input).await.unwrap(), input);
}

#[tokio::test]
async fn config_lookup() {
    let rt = runtime();
    let p = plugin_with(
        &rt,
        &module(
            r#"(func (export "config") (result i32) (local $v i64)
                (local.set $v (call $config_get (call $copy_input)))
                (call $output_set (local.get $v) (call $length (local.get $v)))
                (i32.const 0))"#,
        ),
        r#"{"config": {"greeting": "hi there"}}"#,
        PoolConfig::default(),
    );
    assert_eq!(p.call("config", b"greeting").await.unwrap(), b"hi there");
    assert_eq!(p.call("config", b"missing").await.unwrap(), b"");
}

#[tokio::test]
async fn pool_never_shares_an_instance_under_concurrency() {
    // Each call bumps a global, yields for a while (a long loop), then checks
    // the global is still its own value: two calls on one instance would see
    // each other's increment.
    let rt = runtime();
    let p = Arc::new(plugin_with(
        &rt,
        &module(
            r#"(global $busy (mut i32) (i32.const 0))
            (func (export "exclusive") (result i32) (local $i i32)
              (if (i32.ne (global.get $busy) (i32.const 0)) (then (return (i32.const 99))))
              (global.set $busy (i32.const 1))
              (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br_if $l (i32.lt_u (local.get $i) (i32.const 20000000))))
              (global.set $busy (i32.const 0))
              (i32.const 0))"#,
        ),
        "{}",
        PoolConfig {
            max_instances: 4,
            isolation: false,
            acquire_timeout: Duration::from_secs(30),
            idle_timeout: None,
        },
    ));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.call("exclusive", b"").await })
        })
        .collect();
    for c in calls {
        c.await.unwrap().unwrap();
    }
    assert!(p.status().pool.created <= 4);
}

#[tokio::test]
async fn malformed_wasm_and_missing_imports_are_clear_errors() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"this is not wasm").unwrap();
    let err = Plugin::new(
        &rt,
        &Manifest::from_wasm_file(&bad),
        PluginOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        format!("{err:#}").contains("not a WebAssembly module"),
        "{err:#}"
    );

    let unknown = dir.path().join("unknown.wat");
    std::fs::write(
        &unknown,
        r#"(module (import "extism:host/env" "teleport" (func)))"#,
    )
    .unwrap();
    let err = Plugin::new(
        &rt,
        &Manifest::from_wasm_file(&unknown),
        PluginOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        format!("{err:#}").contains("extism:host/env::teleport"),
        "{err:#}"
    );

    let user = dir.path().join("user.wat");
    std::fs::write(
        &user,
        r#"(module (import "extism:host/user" "lookup" (func (param i64) (result i64))))"#,
    )
    .unwrap();
    let err = Plugin::new(
        &rt,
        &Manifest::from_wasm_file(&user),
        PluginOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        format!("{err:#}").contains("register a host function"),
        "{err:#}"
    );
}

#[tokio::test]
async fn embedder_host_functions_see_extism_memory() {
    use wasmgate_extism::HostFunction;
    use wasmtime::{Val, ValType};
    let wat = module_with_imports(
        r#"(import "extism:host/user" "shout" (func $shout (param i64) (result i64)))"#,
        r#"(func (export "run") (result i32) (local $h i64)
          (local.set $h (call $shout (call $copy_input)))
          (call $output_set (local.get $h) (call $length (local.get $h)))
          (i32.const 0))"#,
    );
    let shout = HostFunction::new(
        "shout",
        [ValType::I64],
        [ValType::I64],
        |plugin, args, results| {
            let text = plugin
                .block(args[0].unwrap_i64() as u64)?
                .to_ascii_uppercase();
            results[0] = Val::I64(plugin.new_block(&text)? as i64);
            Ok(())
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.wat");
    std::fs::write(&path, wat).unwrap();
    let p = Plugin::new(
        &runtime(),
        &Manifest::from_wasm_file(&path),
        PluginOptions {
            host_functions: vec![shout],
            ..PluginOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        p.call("run", b"quiet please").await.unwrap(),
        b"QUIET PLEASE"
    );
}

#[tokio::test]
async fn manifest_modules_link_by_name() {
    use wasmgate_extism::manifest::{WasmData, WasmSource};
    let lib = r#"(module (func (export "add_one") (param i32) (result i32) (i32.add (local.get 0) (i32.const 1))))"#;
    let main = module_with_imports(
        r#"(import "lib" "add_one" (func $add_one (param i32) (result i32)))"#,
        r#"(func (export "run") (result i32) (local $h i64)
          (local.set $h (call $alloc (i64.const 1)))
          (call $store_u8 (local.get $h) (call $add_one (i32.const 64)))
          (call $output_set (local.get $h) (i64.const 1))
          (i32.const 0))"#,
    );
    let source = |text: &str, name: Option<&str>| WasmSource {
        data: Some(WasmData::Bytes(text.as_bytes().to_vec())),
        name: name.map(str::to_string),
        ..WasmSource::default()
    };
    let manifest = Manifest {
        wasm: vec![source(&main, None), source(lib, Some("lib"))],
        ..Manifest::default()
    };
    let p = Plugin::new(&runtime(), &manifest, PluginOptions::default()).unwrap();
    assert_eq!(p.call("run", b"").await.unwrap(), b"A");
    assert_eq!(
        p.call("run", b"").await.unwrap(),
        b"A",
        "second instance links too"
    );
}

#[tokio::test]
async fn isolation_mode_gives_every_call_a_fresh_instance() {
    let rt = runtime();
    let p = plugin_with(
        &rt,
        &module(
            r#"(global $calls (mut i32) (i32.const 0))
            (func (export "count") (result i32) (local $h i64)
              (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
              (local.set $h (call $alloc (i64.const 1)))
              (call $store_u8 (local.get $h) (i32.add (i32.const 48) (global.get $calls)))
              (call $output_set (local.get $h) (i64.const 1))
              (i32.const 0))"#,
        ),
        "{}",
        PoolConfig {
            isolation: true,
            ..PoolConfig::default()
        },
    );
    for _ in 0..3 {
        assert_eq!(p.call("count", b"").await.unwrap(), b"1");
    }
}

#[tokio::test]
async fn a_long_call_finishes_on_the_slow_lane_and_its_instance_is_reused() {
    use wasmgate_extism::HostFunction;
    use wasmtime::{Val, ValType};
    // `where` outputs the name of the thread the call runs on; `count_then_where`
    // first counts to 5e7 (tens of ms), well past the 1 ms after which a call
    // moves, and short enough not to wait long for a lower-priority CPU share.
    let wat = module_with_imports(
        r#"(import "extism:host/user" "thread" (func $thread (result i64)))"#,
        r#"(func $where (export "where") (result i32) (local $h i64)
          (local.set $h (call $thread))
          (call $output_set (local.get $h) (call $length (local.get $h)))
          (i32.const 0))
        (func (export "count_then_where") (result i32) (local $i i64)
          (block $done (loop $next
            (br_if $done (i64.ge_u (local.get $i) (i64.const 50000000)))
            (local.set $i (i64.add (local.get $i) (i64.const 1)))
            (br $next)))
          (call $where))"#,
    );
    let thread = HostFunction::new("thread", [], [ValType::I64], |plugin, _, results| {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        results[0] = Val::I64(plugin.new_block(name.as_bytes())? as i64);
        Ok(())
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("where.wat");
    std::fs::write(&path, wat).unwrap();
    let p = Plugin::new(
        &runtime(),
        &Manifest::from_wasm_file(&path),
        PluginOptions {
            host_functions: vec![thread],
            pool: PoolConfig {
                max_instances: 1,
                ..PoolConfig::default()
            },
            ..PluginOptions::default()
        },
    )
    .unwrap();
    let here = String::from_utf8(p.call("where", b"").await.unwrap()).unwrap();
    assert!(
        !here.starts_with("wasmgate-slow-"),
        "a short call moved: {here}"
    );
    let there = String::from_utf8(p.call("count_then_where", b"").await.unwrap()).unwrap();
    assert!(
        there.starts_with("wasmgate-slow-"),
        "the long call ran on {there}"
    );
    // The next call starts where its caller is, on the same instance.
    assert_eq!(
        String::from_utf8(p.call("where", b"").await.unwrap()).unwrap(),
        here
    );
    assert_eq!(p.status().pool.created, 1);
    // CPU time is counted wherever the call ran, and never exceeds wall time.
    let stats = p.stats().snapshot();
    // It ran 1 ms on its first thread before it moved.
    assert!(stats.cpu_seconds >= 0.001, "{stats:?}");
    assert!(stats.cpu_seconds <= stats.calls.sum_seconds, "{stats:?}");
}
