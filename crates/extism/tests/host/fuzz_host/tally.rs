//! What the fuzzer counts and checks of each plugin call: which host
//! calls ran and how they ended, that a failure is a clean error its
//! function may give, and the invariants of what the functions return.

use std::collections::BTreeMap;

use wasmgate_extism::CallError;

use crate::common::script_guest::*;

/// What a function may fail with: the start of the message of each clean
/// error it has. Functions not listed never fail.
fn allowed_failures(name: &str) -> &'static [&'static str] {
    const NO_MEMORY: &str = "unable to allocate memory";
    // Utf8Error's messages: "invalid utf-8 sequence of 1 bytes from index
    // 0", "incomplete utf-8 byte sequence from index 0".
    const NOT_UTF8: &str = " utf-8 ";
    match name {
        "config_get" => &["invalid handle offset for config key", NOT_UTF8, NO_MEMORY],
        "var_get" => &["invalid handle offset for var key", NOT_UTF8, NO_MEMORY],
        "var_set" => &[
            "Vars are disabled by this host",
            "invalid handle offset for var key",
            "invalid handle offset for var value",
            NOT_UTF8,
            "Variable store is full",
        ],
        "http_request" => &[
            "invalid handle offset for http request",
            "invalid http request JSON",
            "HTTP request to",
            "Invalid URL",
            "HTTP response exceeds the configured maximum",
            NO_MEMORY,
        ],
        "http_headers" => &[NO_MEMORY],
        "log_trace" | "log_debug" | "log_info" | "log_warn" | "log_error" => {
            &["invalid handle offset for log message"]
        }
        // The memory functions never fail: out of range is 0 or ignored.
        _ => &[],
    }
}

#[derive(Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) calls: u64,
    pub(super) returned: u64,
    pub(super) failed: u64,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(super) per_function: Vec<Counts>,
    pub(super) outcomes: BTreeMap<&'static str, u64>,
    pub(super) failures: BTreeMap<String, u64>,
    pub(super) calls: u64,
    pub(super) probes: u64,
}

impl Tally {
    pub(super) fn executions(&self) -> u64 {
        self.per_function.iter().map(|c| c.calls).sum()
    }

    /// Counts one plugin call's host calls and checks how it ended; true if
    /// a host call failed it (and so its instance must be gone).
    pub(super) fn account(
        &mut self,
        reports: &[Report],
        result: &Result<Vec<u8>, CallError>,
        code: i32,
    ) -> bool {
        let mut started: BTreeMap<u64, (u64, bool, i64)> = BTreeMap::new();
        for r in reports.iter().filter(|r| r.is_call()) {
            assert!((r.f as usize) < HOST_FUNCTIONS.len(), "{r:?}");
            let entry = started.entry(r.seq).or_insert((r.f, false, 0));
            assert_eq!(entry.0, r.f, "two functions under one sequence number");
            if r.finished() {
                entry.1 = true;
                entry.2 = r.result;
            }
        }
        let unfinished: Vec<u64> = started
            .iter()
            .filter(|(_, (_, finished, _))| !finished)
            .map(|(seq, _)| *seq)
            .collect();
        assert!(unfinished.len() <= 1, "several calls never returned");
        for (seq, (f, finished, value)) in &started {
            let h = &HOST_FUNCTIONS[*f as usize];
            let c = &mut self.per_function[*f as usize];
            c.calls += 1;
            if *finished {
                c.returned += 1;
                check_result(h.name, *value);
            } else {
                c.failed += 1;
                assert_eq!(
                    Some(seq),
                    started.keys().last(),
                    "calls ran after a failure"
                );
            }
        }
        let failing = unfinished.first().map(|seq| started[seq].0);
        let outcome = match (result, failing) {
            (Err(CallError::Crash(report)), Some(f)) => {
                let name = HOST_FUNCTIONS[f as usize].name;
                assert_eq!(report.function, "run");
                assert_eq!(report.kind.as_str(), "host_error", "{name}: {report}");
                let class = allowed_failures(name)
                    .iter()
                    .find(|prefix| report.message.contains(*prefix))
                    .unwrap_or_else(|| {
                        panic!("{name} failed with an unexpected error: {}", report.message)
                    });
                let class = if class.starts_with(name) {
                    class.to_string()
                } else {
                    format!("{name}: {class}")
                };
                *self.failures.entry(class).or_default() += 1;
                "failed cleanly (instance replaced)"
            }
            // As in the reference runtime, an error the plugin set wins over
            // the failure that ended its call (the instance is still dropped).
            (Err(CallError::Plugin(_)), Some(_))
                if reports
                    .iter()
                    .any(|r| r.finished() && r.f == u64::from(host_fn("error_set"))) =>
            {
                "failed, reported as the error the plugin had set"
            }
            (Err(CallError::Crash(report)), None) => {
                panic!("the call failed with no host call in flight: {report}")
            }
            (_, Some(f)) => panic!(
                "{} never returned, yet the call ended with {result:?}",
                HOST_FUNCTIONS[f as usize].name
            ),
            (Ok(_), None) => "returned output",
            (Err(CallError::Plugin(_)), None) => "plugin error (error_set)",
            (Err(CallError::NonZeroExit(c)), None) => {
                assert_eq!(*c, code, "exit code");
                "non-zero exit"
            }
            (Err(other), None) => panic!("unexpected call error: {other}"),
        };
        *self.outcomes.entry(outcome).or_default() += 1;
        failing.is_some()
    }
}

/// Invariants of results.
fn check_result(name: &str, value: i64) {
    match name {
        "alloc" => assert!(value == 0 || value >= 64, "alloc returned {value}"),
        "memory_bytes" => assert!(value >= 64, "memory_bytes returned {value}"),
        "length" | "length_unsafe" | "input_length" | "output_length" => {
            assert!((0..1 << 33).contains(&value), "{name} returned {value}")
        }
        "http_status_code" => assert!(
            value == 0 || (100..=599).contains(&value),
            "http_status_code returned {value}"
        ),
        "get_log_level" => assert!(
            (0..=4).contains(&value) || value == i64::from(i32::MAX),
            "get_log_level returned {value}"
        ),
        "load_u8" | "input_load_u8" => assert!((0..=255).contains(&value), "{name}: {value}"),
        _ => {}
    }
}
