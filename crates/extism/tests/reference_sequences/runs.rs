//! Running the sequences on each runtime: wasmgate in this process (its
//! plugin log lines captured at INFO, as the reference's log callback sees
//! them), the reference as a child process that reads inputs and writes
//! one JSON result line per sequence.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::Value;
use wasmgate_extism::{CallError, Manifest, Plugin, PluginOptions, Runtime, RuntimeConfig};

use crate::common::script_guest::*;
use crate::compare::{digits_as_n, Outcome, Run};
use crate::targets::Target;

static LOGS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The plugin log lines at INFO and above, as the reference's log callback
/// sees them at `info`.
pub(crate) struct Capture;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

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
        if event.metadata().target() != "wasmgate::plugin" {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        LOGS.lock().unwrap().push((level, message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

pub(crate) async fn wasmgate_runs(wasm: &Path, target: &Target, inputs: &[Vec<u8>]) -> Vec<Run> {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let reports: Reports = Arc::default();
    let mut manifest = Manifest::from_json(&target.manifest_json()).unwrap();
    manifest.wasm = Manifest::from_wasm_file(wasm).wasm;
    let plugin = Plugin::new(
        &runtime,
        &manifest,
        PluginOptions {
            name: Some(format!("diff-{}", target.name)),
            host_functions: vec![report_function(reports.clone())],
            ..PluginOptions::default()
        },
    )
    .unwrap();
    let mut runs = Vec::new();
    for input in inputs {
        reports.lock().unwrap().clear();
        LOGS.lock().unwrap().clear();
        let result = plugin.call("run", input).await;
        let outcome = match result {
            Ok(output) => Outcome::Output(output),
            Err(CallError::Crash(report)) if report.kind.as_str() == "host_error" => {
                Outcome::HostError(digits_as_n(&report.message))
            }
            Err(e @ (CallError::Plugin(_) | CallError::NonZeroExit(_))) => {
                Outcome::Error(e.to_string())
            }
            Err(other) => panic!("unexpected failure: {other}"),
        };
        runs.push(Run {
            reports: std::mem::take(&mut *reports.lock().unwrap()),
            logs: std::mem::take(&mut *LOGS.lock().unwrap()),
            outcome,
        });
    }
    runs
}

/// The reference's result line.
fn reference_run(line: &Value) -> Run {
    let reports = line["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_array().unwrap();
            let v = |i: usize| r[i].as_i64().unwrap();
            Report {
                seq: v(0) as u64,
                f: v(1) as u64,
                phase: v(2) as u8,
                result: v(3),
            }
        })
        .collect();
    let logs = line["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l[0].as_str().unwrap().to_string(),
                l[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let outcome = if line["ok"] == true {
        Outcome::Output(
            base64::engine::general_purpose::STANDARD
                .decode(line["output_b64"].as_str().unwrap())
                .unwrap(),
        )
    } else {
        let (display, chain) = (
            line["error"].as_str().unwrap(),
            line["error_chain"].as_str().unwrap(),
        );
        // A failed host function shows as a trap would; an error the plugin
        // had set is the call's error even then (as in wasmgate).
        if display.starts_with("error while executing at wasm backtrace") {
            // The host function's message ends the chain, after the last
            // frame: "    3: 0x1a2 - <unknown>!<wasm function 7>: <message>".
            let last = chain.lines().last().unwrap_or_default();
            let message = last
                .find('!')
                .and_then(|at| last[at..].split_once(": "))
                .map_or(last, |(_, message)| message);
            Outcome::HostError(digits_as_n(message))
        } else {
            Outcome::Error(display.to_string())
        }
    };
    Run {
        reports,
        logs,
        outcome,
    }
}

pub(crate) fn reference_runs(wasm: &Path, target: &Target, inputs: &[Vec<u8>]) -> Vec<Run> {
    let mut child = Command::new(wasmgate_testkit::extism_reference())
        .arg("script")
        .arg(wasm)
        .args(target.reference_flags())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines: Vec<String> = inputs
        .iter()
        .map(|i| base64::engine::general_purpose::STANDARD.encode(i))
        .collect();
    let writer = std::thread::spawn(move || {
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    });
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // WASMGATE_DIFF_DUMP=FILE keeps the reference's lines, for debugging.
    let mut dump = std::env::var_os("WASMGATE_DIFF_DUMP").map(|path| {
        std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    });
    let runs: Vec<Run> = stdout
        .lines()
        .map(|l| {
            let l = l.unwrap();
            if let Some(dump) = &mut dump {
                writeln!(dump, "{l}").unwrap();
            }
            reference_run(&serde_json::from_str(&l).unwrap())
        })
        .collect();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(runs.len(), inputs.len(), "the reference stopped early");
    runs
}
