//! The official runtime side by side: `wasmgate call --json` and
//! `extism-ref call` (reference/extism-ref, the extism crate, built by
//! `make reference`) on the same plugin, function and flags.

use std::process::{Command, Output};

use serde_json::Value;

use super::wasmgate;

/// One JSON result line per call from each runtime: (wasmgate's, the reference's).
pub fn run_both(plugin_path: &str, function: &str, flags: &[&str]) -> (Vec<Value>, Vec<Value>) {
    let parse = |out: Output, who: &str| -> Vec<Value> {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{who} failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let ours = wasmgate()
        .args(["call", plugin_path, function, "--json"])
        .args(flags)
        .output()
        .unwrap();
    let theirs = Command::new(wasmgate_testkit::extism_reference())
        .args(["call", plugin_path, function])
        .args(flags)
        .output()
        .unwrap();
    (parse(ours, "wasmgate"), parse(theirs, "extism-ref"))
}
