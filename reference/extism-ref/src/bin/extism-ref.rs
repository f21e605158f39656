//! `extism-ref call PLUGIN FUNCTION [--input S] [--config K=V].. [--allow-host H]..
//!  [--memory-limit MIB] [--timeout-ms N] [--max-var-bytes N] [--repeat N] [--host-reflect]`
//!
//! One JSON line per call: `{"ok":true,"output_b64":...}` or
//! `{"ok":false,"error":"..."}` (the error's Display, as the SDK reports it).

use base64::Engine;
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || args[0] != "call" {
        eprintln!("usage: extism-ref call PLUGIN FUNCTION [flags]");
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
        let line = match plugin.call::<&[u8], Vec<u8>>(&function, &input) {
            Ok(out) => {
                json!({"ok": true, "output_b64": base64::engine::general_purpose::STANDARD.encode(out)})
            }
            Err(e) => json!({"ok": false, "error": e.to_string(), "error_chain": format!("{e:#}")}),
        };
        println!("{line}");
    }
}
