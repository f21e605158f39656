//! Reports: what the guest says of each call it made, harvested from the
//! stream's properties (or from shared data for root phases), and their
//! description in a failure message.

use std::fmt::Write as _;

use wasmgate_proxy_wasm::shared::shared;
use wasmgate_proxy_wasm::HttpExchange;

use super::guest::{callback_of, HEADER, NONCE, OP_SIZE, STARTED, TICK};
use super::host_fns::HOST_FUNCTIONS;

#[derive(Clone, Copy, Debug)]
pub(super) struct Report {
    pub(super) seq: u32,
    pub(super) f: u32,
    pub(super) status: u32,
    pub(super) phase: u32,
    pub(super) depth: u32,
}

fn report_prefix() -> Vec<u8> {
    let mut key = NONCE.to_le_bytes().to_vec();
    key.push(b'r');
    key
}

fn parse_report(key: &[u8], value: &[u8]) -> Report {
    assert_eq!(key.len(), 18, "report key {key:?}");
    assert_eq!(value.len(), 16, "report value {value:?}");
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    Report {
        seq: word(key, 13),
        f: word(value, 0),
        status: word(value, 4),
        phase: word(value, 8),
        depth: word(value, 12),
    }
}

/// Takes the reports the last callbacks left in the exchange's properties.
pub(super) fn harvest(exchange: &mut HttpExchange, reports: &mut Vec<Report>) {
    let prefix = report_prefix();
    exchange.properties.retain(|key, value| {
        if key.starts_with(&prefix) {
            reports.push(parse_report(key, value));
            false
        } else {
            true
        }
    });
}

/// Reports of a root phase (configure, VM start), left in shared data under
/// `vm_id`; each is cleared once read (an empty value reads as absent).
pub(super) fn harvest_root(vm_id: &str, phase: u8, reports: &mut Vec<Report>) {
    for seq in 1.. {
        let mut key = report_prefix();
        key.extend_from_slice(&(0xffff_0000 | u32::from(phase)).to_le_bytes());
        key.extend_from_slice(&(seq as u32).to_le_bytes());
        key.push(b'.');
        match shared().get(vm_id, &key) {
            Some((value, _)) if !value.is_empty() => {
                reports.push(parse_report(&key, &value));
                shared().set(vm_id, &key, Vec::new(), 0);
            }
            _ => break,
        }
    }
}

/// Property paths of scripts and reports end in `.`: the host drops one
/// trailing NUL from a path, which a phase or sequence number can end with.
pub(super) fn script_path(phase: u8) -> Vec<u8> {
    let mut path = NONCE.to_le_bytes().to_vec();
    path.push(b's');
    path.push(phase);
    path.push(b'.');
    path
}

/// The scripts of a stream, for a failure message.
pub(super) fn describe_scripts(exchange: &HttpExchange) -> String {
    let mut text = String::new();
    for phase in 0..=TICK {
        let Some(script) = exchange.properties.get(&script_path(phase)) else {
            continue;
        };
        let word = |at: usize| u32::from_le_bytes(script[at..at + 4].try_into().unwrap());
        let ops_at = HEADER as usize + word(24) as usize;
        let names: Vec<&str> = (0..word(0) as usize)
            .map(|i| HOST_FUNCTIONS[word(ops_at + i * OP_SIZE as usize) as usize].name)
            .collect();
        let _ = writeln!(
            text,
            "  {}: action {}, tick {}, allocator mode {} depth {}: {names:?}",
            callback_of(u32::from(phase)),
            word(4),
            word(8),
            word(12),
            word(20)
        );
    }
    text
}

/// Calls as reported, in order, for a failure message.
pub(super) fn describe_reports(reports: &[Report]) -> String {
    let skipped = reports.len().saturating_sub(60);
    let shown = reports
        .iter()
        .take(30)
        .chain(reports.iter().skip(30.max(skipped)));
    let mut text = if skipped > 0 {
        format!("{} calls, the first and last 30: ", reports.len())
    } else {
        String::new()
    };
    text += &shown
        .map(|r| {
            let status = match r.status {
                STARTED => "never returned".to_string(),
                s => s.to_string(),
            };
            format!(
                "{}@{}:{}",
                HOST_FUNCTIONS[r.f as usize].name,
                callback_of(r.phase),
                status
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    text
}
