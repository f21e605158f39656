//! `extism-ref call PLUGIN FUNCTION [--input S] [--config K=V].. [--allow-host H]..
//!  [--memory-limit MIB] [--timeout-ms N] [--max-var-bytes N] [--repeat N] [--host-reflect]`
//!
//! One JSON line per call: `{"ok":true,"output_b64":...}` or
//! `{"ok":false,"error":"..."}` (the error's Display, as the SDK reports it).
//!
//! `extism-ref script PLUGIN [--config K=V].. [--allow-host H].. [--max-var-bytes N]
//!  [--log-level LEVEL]` runs the script guest of wasmgate's tests
//! (`crates/extism/tests/host/common/script_guest.rs`): it registers the guest's
//! report function (`extism:host/user::fuzz_report`), reads one base64 script
//! per line of standard input, calls `run` with it, and prints one JSON line
//! per script: the call's result as above, plus `reports` (each
//! `[seq, f, phase, result]`) and `logs` (each `[level, message]`, what the
//! guest logged through `log_*`, with the SDK's log callback at LEVEL,
//! default `info`). The plugin (and so its vars) lives across scripts.

use std::sync::Mutex;

use base64::Engine;
use extism::{UserData, ValType};
use serde_json::{json, Value};

static REPORTS: Mutex<Vec<[i64; 4]>> = Mutex::new(Vec::new());
static LOGS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() >= 2 && args[0] == "script" {
        return script(&args[1], &args[2..]);
    }
    if args.len() < 3 || args[0] != "call" {
        eprintln!(
            "usage: extism-ref call PLUGIN FUNCTION [flags] | extism-ref script PLUGIN [flags]"
        );
        std::process::exit(2);
    }
    let mut manifest = extism_ref::manifest_for(&args[1]);
    let function = args[2].clone();
    let (mut input, mut repeat, mut reflect) = (Vec::new(), 1, false);
    let mut i = 3;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().expect("flag needs a value");
        match args[i].as_str() {
            "--input" => input = value().into_bytes(),
            "--input-file" => input = std::fs::read(value()).expect("reading input"),
            "--config" => {
                let v = value();
                let (k, v) = v.split_once('=').expect("KEY=VALUE");
                manifest.config.insert(k.into(), v.into());
            }
            "--allow-host" => manifest
                .allowed_hosts
                .get_or_insert_with(Vec::new)
                .push(value()),
            "--memory-limit" => {
                manifest.memory.max_pages = Some(value().parse::<u32>().unwrap() * 16)
            }
            "--timeout-ms" => manifest.timeout_ms = Some(value().parse().unwrap()),
            "--max-var-bytes" => manifest.memory.max_var_bytes = Some(value().parse().unwrap()),
            "--max-http-response-bytes" => {
                manifest.memory.max_http_response_bytes = Some(value().parse().unwrap())
            }
            "--repeat" => repeat = value().parse().unwrap(),
            "--host-reflect" => {
                reflect = true;
                i += 1;
                continue;
            }
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    let mut plugin = match extism_ref::build(manifest, reflect) {
        Ok(p) => p,
        Err(e) => {
            println!("{}", json!({"ok": false, "load_error": format!("{e:#}")}));
            std::process::exit(2);
        }
    };
    for _ in 0..repeat {
        println!("{}", call(&mut plugin, &function, &input));
    }
}

fn call(plugin: &mut extism::Plugin, function: &str, input: &[u8]) -> Value {
    match plugin.call::<&[u8], Vec<u8>>(function, input) {
        Ok(out) => {
            json!({"ok": true, "output_b64": base64::engine::general_purpose::STANDARD.encode(out)})
        }
        Err(e) => json!({"ok": false, "error": e.to_string(), "error_chain": format!("{e:#}")}),
    }
}

/// A plugin log line as the SDK's callback gets it, formatted by
/// tracing-subscriber: `<time> <LEVEL> extism::pdk: <message> plugin=<id>`.
fn plugin_log(line: &str) -> Option<(String, String)> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let (head, rest) = line.split_once(" extism::pdk: ")?;
    let level = head.split_whitespace().last()?.to_ascii_lowercase();
    let message = match rest.rfind(" plugin=") {
        Some(at) => &rest[..at],
        None => rest,
    };
    Some((level, message.to_string()))
}

fn script(path: &str, flags: &[String]) {
    let mut manifest = extism_ref::manifest_for(path);
    let mut level = "info".to_string();
    let mut i = 0;
    while i < flags.len() {
        let value = flags.get(i + 1).cloned().expect("flag needs a value");
        match flags[i].as_str() {
            "--config" => {
                let (k, v) = value.split_once('=').expect("KEY=VALUE");
                manifest.config.insert(k.into(), v.into());
            }
            "--allow-host" => manifest
                .allowed_hosts
                .get_or_insert_with(Vec::new)
                .push(value),
            "--max-var-bytes" => manifest.memory.max_var_bytes = Some(value.parse().unwrap()),
            "--log-level" => level = value,
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    extism::set_log_callback(
        |line| {
            if let Some(entry) = plugin_log(line) {
                LOGS.lock().unwrap().push(entry);
            }
        },
        &level,
    )
    .expect("installing the log callback");
    let builder = extism::PluginBuilder::new(manifest)
        .with_wasi(false)
        .with_http_response_headers(true)
        .with_function_in_namespace(
            "extism:host/user",
            "fuzz_report",
            [ValType::I64, ValType::I64, ValType::I64, ValType::I64],
            [],
            UserData::new(()),
            |_, inputs, _, _| {
                let get = |i: usize| inputs[i].i64().unwrap_or_default();
                REPORTS
                    .lock()
                    .unwrap()
                    .push([get(0), get(1), get(2), get(3)]);
                Ok(())
            },
        );
    let mut plugin = match builder.build() {
        Ok(p) => p,
        Err(e) => {
            println!("{}", json!({"ok": false, "load_error": format!("{e:#}")}));
            std::process::exit(2);
        }
    };
    for line in std::io::stdin().lines() {
        let line = line.expect("reading scripts");
        if line.trim().is_empty() {
            continue;
        }
        let input = base64::engine::general_purpose::STANDARD
            .decode(line.trim())
            .expect("a base64 script");
        REPORTS.lock().unwrap().clear();
        LOGS.lock().unwrap().clear();
        let mut result = call(&mut plugin, "run", &input);
        result["reports"] = json!(std::mem::take(&mut *REPORTS.lock().unwrap()));
        result["logs"] = json!(std::mem::take(&mut *LOGS.lock().unwrap()));
        println!("{result}");
    }
}
