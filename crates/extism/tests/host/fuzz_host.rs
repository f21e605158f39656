//! R6 of the reliability suite (issue 4): a long-running property test that
//! drives every function of `extism:host/env` (the host's and the kernel's)
//! with hostile handles, offsets, lengths and sequences, and checks that the
//! host never panics, that every failure is a clean error of the function
//! that refused the call, that a failed instance is replaced, and that
//! well-formed calls through the same plugin still work after each batch.
//!
//! The guest is the script guest of `common/script_guest.rs`, generated from
//! its table of host functions: it imports every function and interprets the
//! script it gets as input, which it copies into its own linear memory first
//! (no Extism function can write there, so no hostile call can change the
//! script). Each call under test is reported, before and after, through a
//! host function of the test's own (`extism:host/user::fuzz_report`), so a
//! call that fails its plugin call is known by name. Outbound HTTP goes to a small server in the
//! test that answers well, badly, slowly or not at all.
//!
//! `WASMGATE_FUZZ_ITERS` (plugin calls, default 40000), `WASMGATE_FUZZ_SEED`
//! (default fixed) and `WASMGATE_FUZZ_SECS` (optional time cap) steer it;
//! `reliability/r6_fuzz.sh` runs it for minutes. The summary is printed with
//! `--nocapture`.
//!
//! The parts: the scripts (`fuzz_host/generator.rs`), what is counted and
//! checked of each call (`tally.rs`), the plugins and their probes
//! (`target.rs`) and the HTTP server (`http_server.rs`).

mod generator;
mod http_server;
mod tally;
mod target;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::script_guest::*;
use generator::{fuzz_data, Generator};
use http_server::serve_http;
use tally::{Counts, Tally};
use target::{make_plugin, Target};
use wasmgate_extism::{Manifest, Plugin, PluginOptions, Runtime, RuntimeConfig};
use wasmgate_testkit::fuzz::{env_u64, LogSink};

const DEFAULT_SEED: u64 = 0x5eed_0006;
const BATCH: u64 = 100;
const MAX_OPS: u32 = 24;
const HANG: Duration = Duration::from_secs(30);

#[test]
fn the_table_names_every_host_function() {
    let mut table: Vec<&str> = HOST_FUNCTIONS.iter().map(|h| h.name).collect();
    let mut host: Vec<&str> = wasmgate_extism::host_env::FUNCTIONS.to_vec();
    table.sort_unstable();
    host.sort_unstable();
    assert_eq!(table, host);
}

#[tokio::test(flavor = "current_thread")]
async fn every_host_function_survives_hostile_calls() {
    let _ = tracing::subscriber::set_global_default(LogSink);
    let seed = env_u64("WASMGATE_FUZZ_SEED", DEFAULT_SEED);
    let iterations = env_u64("WASMGATE_FUZZ_ITERS", 40_000);
    let time_cap = std::env::var("WASMGATE_FUZZ_SECS")
        .ok()
        .map(|s| Duration::from_secs_f64(s.trim().parse().expect("WASMGATE_FUZZ_SECS")));
    let mut rng = Rng(seed);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve_http(listener));

    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wasm_path = dir.path().join("fuzz.wat");
    std::fs::write(&wasm_path, guest_wat()).unwrap();
    let reports: Reports = Arc::default();
    let config = r#""config":{"greeting":"hello from the manifest","empty":"","v1":"x"}"#;
    // A: capped memory (4 MiB of Extism memory), vars, local HTTP allowed.
    // B: a 64 MiB cap, vars disabled, tiny HTTP responses, any host. (Without
    // a cap Extism memory may hold 4 GiB, as documented, and the host copies
    // what a call outputs or logs: a fuzzer that asks for that all the time
    // only measures memcpy; the 4 GiB edge has its own test below.)
    let targets = [
        Target {
            plugin: make_plugin(
                &runtime,
                &wasm_path,
                &format!(
                    r#"{{{config},"memory":{{"max_pages":64,"max_var_bytes":65536}},"allowed_hosts":["127.0.0.1"],"timeout_ms":10000}}"#
                ),
                "fuzz-capped",
                &reports,
            ),
            name: "fuzz-capped",
            vars: true,
            probe_key: format!("probe-key-{:x}", rng.next_u64()),
        },
        Target {
            plugin: make_plugin(
                &runtime,
                &wasm_path,
                &format!(
                    r#"{{{config},"memory":{{"max_pages":1024,"max_var_bytes":0,"max_http_response_bytes":1000}},"allowed_hosts":["*"],"timeout_ms":10000}}"#
                ),
                "fuzz-no-vars",
                &reports,
            ),
            name: "fuzz-no-vars",
            vars: false,
            probe_key: String::new(),
        },
    ];
    let data = fuzz_data(port, &mut rng);
    let mut tally = Tally {
        per_function: vec![Counts::default(); HOST_FUNCTIONS.len()],
        ..Tally::default()
    };
    for target in &targets {
        target.probe(&reports, &mut tally, true, &mut rng).await;
    }

    let started = Instant::now();
    let mut done = 0;
    while done < iterations && time_cap.is_none_or(|cap| started.elapsed() < cap) {
        done += 1;
        let target = &targets[rng.below(2) as usize];
        let mut gen = Generator::new(&mut rng, &data);
        let script = gen.script(MAX_OPS);
        let input = script.encode(&data);
        reports.lock().unwrap().clear();
        let before = target.plugin.status().pool;
        let result = tokio::time::timeout(HANG, target.plugin.call("run", &input))
            .await
            .unwrap_or_else(|_| panic!("call {done} hung (seed {seed:#x})"));
        let call_reports = std::mem::take(&mut *reports.lock().unwrap());
        let crashed = tally.account(&call_reports, &result, script.code);
        tally.calls += 1;
        // Only a failed call's instance is dropped; the next call gets a new one.
        let after = target.plugin.status().pool;
        assert_eq!(after.in_use, 0);
        assert_eq!(after.discarded, before.discarded + u64::from(crashed));
        assert_eq!(after.created, before.created + u64::from(before.idle == 0));
        assert_eq!(after.created - after.discarded, after.idle as u64);

        if done % BATCH == 0 {
            for target in &targets {
                target.probe(&reports, &mut tally, false, &mut rng).await;
            }
        }
    }
    for target in &targets {
        target.probe(&reports, &mut tally, false, &mut rng).await;
    }
    let elapsed = started.elapsed();

    let executions = tally.executions();
    let exercised = tally.per_function.iter().filter(|c| c.calls > 0).count();
    println!(
        "extism host functions: seed {seed:#x}, {} plugin calls, {} probe rounds, {executions} hostile calls in {:.1} s",
        tally.calls,
        tally.probes,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<18} {:>9} {:>9} {:>8}",
        "function", "calls", "returned", "failed"
    );
    for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
        println!(
            "{:<18} {:>9} {:>9} {:>8}",
            h.name, c.calls, c.returned, c.failed
        );
    }
    println!("outcomes: {:?}", tally.outcomes);
    println!("clean failures: {:#?}", tally.failures);
    println!("plugin log events formatted: {}", LogSink::events());
    println!(
        "R6 extism: executions={executions} functions={exercised} calls={} seconds={:.1} seed={seed:#x} crashes=0",
        tally.calls,
        elapsed.as_secs_f64()
    );
    if done >= 1000 {
        for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
            assert!(c.calls > 0, "{} was never called", h.name);
            assert!(c.returned > 0, "{} never returned", h.name);
        }
    }
}

/// Extism memory filled to exactly 4 GiB (the cap without `max_pages`): the
/// last bytes are readable and writable; one byte further, loads give 0 and
/// stores and `output_set` are ignored, as in the reference kernel; and no
/// offset wraps around into the kernel's header.
#[tokio::test(flavor = "current_thread")]
async fn extism_memory_ends_exactly_at_4_gib() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wasm_path = dir.path().join("fuzz.wat");
    std::fs::write(&wasm_path, guest_wat()).unwrap();
    let reports: Reports = Arc::default();
    // A new instance for every call: an instance that is reused zeroes the
    // bytes its last call used before it hands them out again (as the
    // reference kernel's reset does), which would touch all 4 GiB.
    let mut manifest = Manifest::from_json("{}").unwrap();
    manifest.wasm = Manifest::from_wasm_file(&wasm_path).wasm;
    let plugin = Plugin::new(
        &runtime,
        &manifest,
        PluginOptions {
            name: Some("fuzz-4gib".into()),
            host_functions: vec![report_function(reports.clone())],
            pool: wasmgate_extism::PoolConfig {
                isolation: true,
                ..Default::default()
            },
            ..PluginOptions::default()
        },
    )
    .unwrap();
    const END: u64 = 1 << 32;
    // Blocks start after the 64-byte header and the input (this script).
    let script = |input_len: u64, last: [Op; 2]| {
        let mut ops = vec![
            call_op("alloc", 6, lit(END - 64 - input_len), lit(0)),
            call_op("store_u64", 7, lit(END - 8), lit(0x1122_3344_5566_7788)),
            call_op("store_u8", 8, lit(END - 1), lit(0x99)),
            call_op("load_u8", 9, lit(END - 1), lit(0)),
            call_op("memory_bytes", 10, lit(0), lit(0)),
            call_op("output_set", 11, lit(END - 8), lit(8)),
        ];
        ops.extend(last);
        probe_script(&[], ops)
    };
    let nothing = call_op("output_length", 12, lit(0), lit(0));
    let input_len = script(0, [nothing; 2]).len() as u64;
    let run = |last: [Op; 2]| {
        let input = script(input_len, last);
        assert_eq!(input.len() as u64, input_len);
        let plugin = &plugin;
        let reports = reports.clone();
        async move {
            reports.lock().unwrap().clear();
            let result = plugin.call("run", &input).await;
            let reports = std::mem::take(&mut *reports.lock().unwrap());
            (result, reports)
        }
    };
    let returned = |reports: &[Report], op: u32| {
        reports
            .iter()
            .filter(|r| r.finished())
            .nth(op as usize)
            .map(|r| r.result)
    };
    let (result, reports) = run([nothing; 2]).await;
    let output = result.unwrap();
    assert_eq!(output, [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x99]);
    assert_eq!(
        returned(&reports, 0),
        Some((64 + input_len) as i64),
        "alloc"
    );
    assert_eq!(returned(&reports, 3), Some(0x99), "load_u8");
    assert_eq!(
        returned(&reports, 4),
        Some((END - 64) as i64),
        "memory_bytes"
    );
    // (the two last ops, which one to check, what it must return)
    for (last, op, expected) in [
        (
            [call_op("load_u64", 12, lit(END - 7), lit(0)), nothing],
            6,
            0,
        ),
        ([call_op("load_u8", 12, lit(END), lit(0)), nothing], 6, 0),
        (
            [
                call_op("store_u8", 12, lit(END), lit(1)),
                call_op("load_u8", 13, lit(END - 1), lit(0)),
            ],
            7,
            0x99,
        ),
        (
            [
                call_op("output_set", 12, lit(END - 8), lit(9)),
                call_op("output_length", 13, lit(0), lit(0)),
            ],
            7,
            8,
        ),
        // 2^32 + 8 would be offset 8 (the header's end of the data region) if
        // it wrapped, and every later load would return 0.
        (
            [
                call_op("store_u64", 12, lit(END + 8), lit(0)),
                call_op("load_u8", 13, lit(END - 1), lit(0)),
            ],
            7,
            0x99,
        ),
        (
            [
                call_op("store_u64", 12, lit(u64::MAX - 7), lit(0)),
                call_op("load_u64", 13, lit(END - 8), lit(0)),
            ],
            7,
            0x9922_3344_5566_7788_u64 as i64,
        ),
    ] {
        let (result, reports) = run(last).await;
        let what = HOST_FUNCTIONS[last[0].f as usize].name;
        assert_eq!(
            result.unwrap(),
            [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x99],
            "{what}"
        );
        assert_eq!(returned(&reports, op), Some(expected), "{what}");
    }
}
