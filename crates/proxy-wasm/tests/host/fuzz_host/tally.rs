//! Bookkeeping: the outcome of every call per host function, and the check
//! that a failure is a clean error of the call that was in flight.

use std::collections::BTreeMap;

use super::guest::{callback_of, PHASES, STARTED};
use super::host_fns::{HOST_FUNCTIONS, STATUSES, STUBBED};
use super::reports::Report;

#[derive(Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) calls: u64,
    pub(super) ok: u64,
    pub(super) other_status: u64,
    /// The call that failed the callback.
    pub(super) failed: u64,
    /// Calls still in flight when a call they made (re-entrantly) failed.
    pub(super) interrupted: u64,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(super) per_function: Vec<Counts>,
    pub(super) per_phase: [u64; PHASES],
    /// Clean failures by class.
    pub(super) failures: BTreeMap<&'static str, u64>,
    pub(super) streams: u64,
    pub(super) probes: u64,
    pub(super) root_plugins: u64,
    pub(super) max_depth: u32,
}

impl Tally {
    pub(super) fn new() -> Tally {
        Tally {
            per_function: vec![Counts::default(); HOST_FUNCTIONS.len()],
            ..Tally::default()
        }
    }

    pub(super) fn executions(&self) -> u64 {
        self.per_function.iter().map(|c| c.calls).sum()
    }

    /// Counts the calls of one stream (or root start-up) and checks how it
    /// ended: `failure` is the crash message, if it failed.
    pub(super) fn account(&mut self, reports: &[Report], failure: Option<(&str, &str, bool)>) {
        self.count(reports, false, failure);
    }

    /// Counts the calls of a stream whose callback was interrupted at its
    /// deadline: whatever was in flight was cut short, not refused.
    pub(super) fn account_interrupted(&mut self, reports: &[Report]) {
        self.count(reports, true, None);
        *self.failures.entry("callback deadline").or_default() += 1;
    }

    pub(super) fn count(
        &mut self,
        reports: &[Report],
        interrupted: bool,
        failure: Option<(&str, &str, bool)>,
    ) {
        let started: Vec<&Report> = reports.iter().filter(|r| r.status == STARTED).collect();
        let failing = started
            .iter()
            .max_by_key(|r| r.depth)
            .copied()
            .filter(|_| !interrupted);
        for r in reports {
            assert!(
                (r.f as usize) < HOST_FUNCTIONS.len(),
                "report of unknown function {r:?}"
            );
            let c = &mut self.per_function[r.f as usize];
            c.calls += 1;
            self.per_phase[r.phase as usize] += 1;
            self.max_depth = self.max_depth.max(r.depth);
            if r.status == STARTED {
                if failing.is_some_and(|f| f.seq == r.seq) {
                    c.failed += 1;
                } else {
                    c.interrupted += 1;
                }
            } else if r.status == 0 {
                c.ok += 1;
            } else {
                assert!(
                    STATUSES.contains(&r.status),
                    "{} returned {}, which is not a Proxy-Wasm status",
                    HOST_FUNCTIONS[r.f as usize].name,
                    r.status
                );
                assert!(
                    HOST_FUNCTIONS[r.f as usize].returns_status,
                    "a call without a status returned"
                );
                c.other_status += 1;
            }
        }
        match (failure, failing) {
            (None, None) => {}
            (None, Some(r)) => panic!(
                "{} never returned, yet its callback succeeded: {reports:?}",
                HOST_FUNCTIONS[r.f as usize].name
            ),
            (Some((callback, message, _)), None) => panic!(
                "{callback} failed with no host call in flight (the harness broke?): {message}"
            ),
            (Some((callback, message, trap)), Some(r)) => {
                let class = classify(r, started.len(), callback, message, trap);
                *self.failures.entry(class).or_default() += 1;
            }
        }
    }
}

/// Checks that a failure is a clean error of the call that was in flight,
/// and names its class.
fn classify(
    failing: &Report,
    in_flight: usize,
    callback: &str,
    message: &str,
    trap: bool,
) -> &'static str {
    let name = HOST_FUNCTIONS[failing.f as usize].name;
    assert_eq!(
        callback,
        callback_of(failing.phase),
        "{name} failed in phase {} but the report names {callback}: {message}",
        failing.phase
    );
    let prefix = match name {
        "proxy_replace_header_map_value" | "proxy_add_header_map_value" => "header map edit",
        _ => name,
    };
    let decodes_maps = matches!(
        name,
        "proxy_set_header_map_pairs"
            | "proxy_send_local_response"
            | "proxy_http_call"
            | "proxy_grpc_call"
            | "proxy_grpc_stream"
    );
    // The guest never traps on its own (its loads stay in bounds), so a
    // trap would be the host's doing.
    assert!(!trap, "unexpected trap during {name}: {message}");
    if message.contains(&format!("{prefix}: guest range")) {
        "bad guest pointer or length"
    } else if message.contains(&format!("{prefix}: the guest could not allocate")) {
        "guest allocator returned null"
    } else if message.contains(&format!(
        "{prefix}: the guest's allocator re-entered the host"
    )) {
        assert!(
            in_flight > 1,
            "{name} refused a re-entry with nothing in flight"
        );
        "guest allocator re-entered the host too deep"
    } else if decodes_maps && message.contains("malformed header map") {
        "malformed header map"
    } else if STUBBED.contains(&name) && message.contains(&format!("{name} is not implemented")) {
        "unknown import without a status"
    } else {
        panic!("{name} failed with an unexpected error in {callback}: {message}")
    }
}
