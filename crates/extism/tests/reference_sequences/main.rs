//! Differential test of the Extism host ABI's edge semantics: generated
//! sequences of `extism:host/env` calls run on wasmgate and on the reference
//! runtime (the official `extism` crate 1.30.0 in `reference/extism-ref`,
//! built by `make reference`), compared call by call.
//!
//! Both run the script guest (`host/common/script_guest.rs`), which reports every
//! call and its result through `extism:host/user::fuzz_report`; the reference
//! binary's `script` mode registers the same function and prints the reports,
//! the guest's log lines and the outcome as JSON. The sequences include the
//! edges: the null handle (0, and `alloc(0)`), freed handles, interior
//! pointers, out-of-range offsets, reads past the input, `output_set` and
//! `input_set` on odd pointers, `error_set` on freed blocks, `reset`, keys
//! that are not UTF-8, full and disabled vars, and HTTP requests (to a server
//! in the test).
//!
//! What is compared, per call: whether it returned, and what it returned.
//! Handles differ between the runtimes (the reference keeps 12-byte block
//! headers in its memory, wasmgate on the host), so a handle is compared by
//! what it names: null, a new block, the same block as the k-th handle seen,
//! or an offset into it. Values read from memory are compared exactly; the
//! generator reads and writes only inside blocks, or far outside the memory
//! (below 57 or past 4 GiB), since what lies between blocks is each
//! runtime's own. Sequences stay small (a few KiB of Extism memory), so
//! that neither runtime reaches the point where it reuses freed blocks
//! (which depends on how full each one's memory is). Per sequence, the
//! outcome (output, the plugin's error, the return code, or which call failed
//! and with what message) and the log lines must match too.
//!
//! `WASMGATE_DIFF_SEQUENCES` (default 600, shared by the two configurations)
//! and `WASMGATE_DIFF_SEED` steer it; `WASMGATE_DIFF_DUMP=FILE` keeps the
//! reference's raw result lines.
//!
//! The parts: the two configurations (`targets.rs`), the data of the
//! blocks (`entries.rs`), the sequences (`generator.rs`,
//! `fixed_scripts.rs`), running them on each runtime (`runs.rs`, against
//! the server of `http_server.rs`) and comparing the runs (`compare.rs`).
//! A test binary of its own: see `../host/main.rs`.

use std::collections::BTreeMap;

use wasmgate_testkit::fuzz::env_u64;

#[path = "../host/common/mod.rs"]
mod common;
mod compare;
mod entries;
mod fixed_scripts;
mod generator;
mod http_server;
mod runs;
mod targets;

use common::script_guest::*;
use compare::{describe_script, difference, Outcome};
use entries::Entries;
use fixed_scripts::fixed_scripts;
use generator::Generator;
use http_server::serve_http;
use runs::{reference_runs, wasmgate_runs, Capture};
use targets::TARGETS;

#[tokio::test(flavor = "current_thread")]
async fn generated_sequences_match_the_reference_call_by_call() {
    tracing::subscriber::set_global_default(Capture).unwrap();
    // A missing reference fails here, saying how to build it, before any work.
    wasmgate_testkit::extism_reference();
    let sequences = env_u64("WASMGATE_DIFF_SEQUENCES", 600);
    let seed = env_u64("WASMGATE_DIFF_SEED", 0xd1ff_0019);
    let port = serve_http();
    let entries = Entries::new(port);
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("script_guest.wat");
    std::fs::write(&wasm, guest_wat()).unwrap();

    let mut rng = Rng(seed);
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for target in TARGETS {
        let mut scripts = fixed_scripts(&entries);
        let fixed = scripts.len();
        for _ in 0..sequences / TARGETS.len() as u64 {
            let mut generator = Generator::new(&mut rng, &entries, target);
            scripts.push(generator.script());
        }
        let inputs: Vec<Vec<u8>> = scripts.iter().map(|s| s.encode(&entries.data)).collect();
        let ours = wasmgate_runs(&wasm, target, &inputs).await;
        // Blocks this thread: the HTTP server has its own threads.
        let theirs = reference_runs(&wasm, target, &inputs);
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            let calls = o.reports.iter().filter(|r| r.finished()).count() as u64;
            *totals.entry(format!("{} calls", target.name)).or_default() += calls;
            let class = match &o.outcome {
                Outcome::Output(_) => "output".to_string(),
                Outcome::Error(_) => "plugin error or return code".to_string(),
                Outcome::HostError(m) => {
                    let m: String = m.chars().take(40).collect();
                    format!("a host function failed it: {m}")
                }
            };
            *totals
                .entry(format!("{} outcome: {class}", target.name))
                .or_default() += 1;
            for r in o.reports.iter().filter(|r| r.finished()) {
                *totals
                    .entry(format!("fn {}", HOST_FUNCTIONS[r.f as usize].name))
                    .or_default() += 1;
            }
            if let Some(why) = difference(o, t) {
                let which = if i < fixed {
                    format!("fixed sequence {i}")
                } else {
                    format!("generated sequence {}", i - fixed)
                };
                failures.push(format!(
                    "{} / {which} (seed {seed:#x}):\n{}{why}\n  wasmgate outcome: {:?}\n  extism outcome:   {:?}",
                    target.name,
                    describe_script(&scripts[i], &entries),
                    o.outcome,
                    t.outcome
                ));
            }
        }
    }
    for (what, n) in &totals {
        println!("{what}: {n}");
    }
    assert!(
        failures.is_empty(),
        "{} of the sequences differ; the first ones:\n\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    for h in HOST_FUNCTIONS {
        assert!(
            totals.contains_key(&format!("fn {}", h.name)),
            "{} was never called",
            h.name
        );
    }
}
