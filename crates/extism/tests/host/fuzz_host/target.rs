//! The plugins under test and their probes: well-formed calls, between
//! batches of hostile ones, whose outputs are checked.

use wasmgate_extism::{Manifest, Plugin, PluginOptions, Runtime};

use super::tally::Tally;
use super::HANG;
use crate::common::script_guest::*;

const PROBE_VALUE: &[u8] = b"the probe's value";

/// One plugin under test, with what its probes expect.
pub(super) struct Target {
    pub(super) plugin: Plugin,
    pub(super) name: &'static str,
    pub(super) vars: bool,
    pub(super) probe_key: String,
}

pub(super) fn make_plugin(
    runtime: &Runtime,
    wasm_path: &std::path::Path,
    manifest: &str,
    name: &'static str,
    reports: &Reports,
) -> Plugin {
    let mut manifest = Manifest::from_json(manifest).unwrap();
    manifest.wasm = Manifest::from_wasm_file(wasm_path).wasm;
    Plugin::new(
        runtime,
        &manifest,
        PluginOptions {
            name: Some(name.into()),
            host_functions: vec![report_function(reports.clone())],
            ..PluginOptions::default()
        },
    )
    .unwrap()
}

impl Target {
    /// Well-formed calls whose outputs are checked: an echo of a block, a
    /// config value, the var the first probe set, and the input itself.
    pub(super) async fn probe(
        &self,
        reports: &Reports,
        tally: &mut Tally,
        first: bool,
        rng: &mut Rng,
    ) {
        let token = format!("token-{:016x}", rng.next_u64());
        let key = self.probe_key.as_bytes();
        let output = |block: u32| {
            vec![
                call_op("length", 10, reg(block, 0), lit(0)),
                call_op("output_set", 11, reg(block, 0), reg(10, 0)),
            ]
        };
        let mut checks: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (
                probe_script(&[token.as_bytes()], output(0)),
                token.clone().into_bytes(),
            ),
            (
                probe_script(&[b"greeting"], {
                    let mut ops = vec![call_op("config_get", 1, reg(0, 0), lit(0))];
                    ops.extend(output(1));
                    ops
                }),
                b"hello from the manifest".to_vec(),
            ),
        ];
        if self.vars {
            if first {
                let set = probe_script(
                    &[key, PROBE_VALUE],
                    vec![call_op("var_set", 12, reg(0, 0), reg(1, 0))],
                );
                checks.push((set, Vec::new()));
            }
            let get = probe_script(&[key], {
                let mut ops = vec![call_op("var_get", 2, reg(0, 0), lit(0))];
                ops.extend(output(2));
                ops
            });
            checks.push((get, PROBE_VALUE.to_vec()));
        }
        let echo = probe_script(
            &[],
            vec![
                call_op("input_offset", 3, lit(0), lit(0)),
                call_op("input_length", 4, lit(0), lit(0)),
                call_op("output_set", 5, reg(3, 0), reg(4, 0)),
            ],
        );
        checks.push((echo.clone(), echo));
        for (input, expected) in checks {
            reports.lock().unwrap().clear();
            let output = tokio::time::timeout(HANG, self.plugin.call("run", &input))
                .await
                .expect("the probe hung")
                .unwrap_or_else(|e| panic!("{}: the probe failed: {e}", self.name));
            assert_eq!(output, expected, "{}: probe output", self.name);
            let mut reports = std::mem::take(&mut *reports.lock().unwrap());
            reports.retain(Report::is_call);
            assert!(reports.iter().any(|r| r.finished()));
            assert!(
                reports
                    .chunks(2)
                    .all(|pair| pair.len() == 2 && pair[1].finished()),
                "{}: a probe call did not return: {reports:?}",
                self.name
            );
        }
        tally.probes += 1;
    }
}
