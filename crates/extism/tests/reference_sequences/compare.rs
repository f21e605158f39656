//! What is compared between the runtimes: one sequence's run (its calls'
//! reports, log lines and outcome), handles by what they name, and the
//! differences the two runtimes are allowed.

use crate::common::script_guest::*;
use crate::entries::Entries;

/// One sequence's run on one runtime.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) reports: Vec<Report>,
    pub(crate) logs: Vec<(String, String)>,
    pub(crate) outcome: Outcome,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    Output(Vec<u8>),
    /// The plugin's error (`error_set`) or the non-zero return's message.
    Error(String),
    /// A host function failed the call; its message, digits as `N`.
    HostError(String),
}

/// What tracing-subscriber's formatter makes of a message (0.3.20 and
/// later escape terminal control characters).
fn escape_controls(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' => out += &format!("\\x{:02x}", c as u32),
            c if (0x80..=0x9f).contains(&(c as u32)) => out += &format!("\\u{{{:x}}}", c as u32),
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn digits_as_n(text: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    out
}

/// How a result is compared: handles by what they name.
#[derive(Default)]
struct Handles {
    seen: Vec<u64>,
}

impl Handles {
    /// A new block's handle (or 0, or a reused block's).
    fn block(&mut self, value: i64) -> String {
        let v = value as u64;
        if v == 0 {
            return "null".into();
        }
        if let Some(k) = self.seen.iter().rposition(|&s| s == v) {
            return format!("=#{k}");
        }
        self.seen.push(v);
        format!("new #{}", self.seen.len() - 1)
    }

    /// A pointer the guest passed in: a handle seen, or an offset into one.
    fn pointer(&mut self, value: i64) -> String {
        let v = value as u64;
        if v == 0 {
            return "null".into();
        }
        if let Some(k) = self.seen.iter().rposition(|&s| s == v) {
            return format!("=#{k}");
        }
        let below = self
            .seen
            .iter()
            .enumerate()
            .filter(|(_, &s)| s < v && v - s < 4096)
            .max_by_key(|(_, &s)| s);
        if let Some((k, s)) = below {
            return format!("#{k}+{}", v - s);
        }
        self.seen.push(v);
        format!("new #{}", self.seen.len() - 1)
    }
}

/// The reports as comparable lines.
fn describe(reports: &[Report]) -> Vec<String> {
    let mut handles = Handles::default();
    let mut lines = Vec::new();
    for r in reports {
        if r.phase == 2 {
            lines.push(format!("block -> {}", handles.block(r.result)));
            continue;
        }
        let name = HOST_FUNCTIONS[r.f as usize].name;
        if r.phase == 0 {
            lines.push(format!("{name} ..."));
            continue;
        }
        let value = match name {
            "alloc" | "config_get" | "var_get" | "http_request" => handles.block(r.result),
            "input_offset" | "output_offset" | "error_get" => handles.pointer(r.result),
            // Headers differ by HTTP client (date, server, ...).
            "http_headers" => (if r.result == 0 { "null" } else { "a block" }).into(),
            "reset" => {
                handles = Handles::default();
                "0".into()
            }
            _ => r.result.to_string(),
        };
        lines.push(format!("{name} -> {value}"));
    }
    lines
}

pub(crate) fn describe_script(script: &Script, entries: &Entries) -> String {
    let arg = |a: Arg| {
        if a.mode == 1 {
            format!("r{}+{}", a.reg, a.value as i64)
        } else {
            format!("{}", a.value as i64)
        }
    };
    let mut out = String::new();
    for op in &script.ops {
        if op.f == NEW_BLOCK {
            let bytes =
                &entries.data.bytes[op.a.value as usize..(op.a.value + op.b.value) as usize];
            out += &format!(
                "  r{} = block {:?}\n",
                op.dest,
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
            );
        } else {
            out += &format!(
                "  r{} = {}({}, {})\n",
                op.dest,
                HOST_FUNCTIONS[op.f as usize].name,
                arg(op.a),
                arg(op.b)
            );
        }
    }
    out += &format!("  return {}\n", script.code);
    out
}

/// What must agree between the runtimes, or why it does not; `None` when equal.
pub(crate) fn difference(ours: &Run, theirs: &Run) -> Option<String> {
    let (a, b) = (describe(&ours.reports), describe(&theirs.reports));
    if a != b {
        let first = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        return Some(format!(
            "reports differ at {first}:\n  wasmgate: {:?}\n  extism:   {:?}",
            &a[first.saturating_sub(2)..(first + 2).min(a.len())],
            &b[first.saturating_sub(2)..(first + 2).min(b.len())],
        ));
    }
    match (&ours.outcome, &theirs.outcome) {
        // An error message that is not UTF-8: wasmgate reports it lossily,
        // the reference says it could not read it.
        (Outcome::Error(o), Outcome::Error(t))
            if o.contains('\u{fffd}')
                && t.starts_with("unable to load error message from memory: ") => {}
        // The same message, or wasmgate's says what was invalid first
        // ("invalid http request JSON: " and serde's message).
        (Outcome::HostError(o), Outcome::HostError(t)) if !o.ends_with(t.as_str()) => {
            return Some(format!(
                "host errors differ:\n  wasmgate: {o}\n  extism:   {t}"
            ));
        }
        // A host function failed the call after the plugin had set an
        // error: wasmgate's caller gets the plugin's error; the reference's
        // error shows the trap, with the plugin's message (not the host
        // function's) at the end of its chain.
        (Outcome::Error(o), Outcome::HostError(t))
            if &digits_as_n(o) == t && ours.reports.last().is_some_and(|r| r.phase == 0) => {}
        (Outcome::HostError(_), Outcome::HostError(_)) => {}
        (o, t) if o != t => {
            return Some(format!(
                "outcomes differ:\n  wasmgate: {o:?}\n  extism:   {t:?}"
            ))
        }
        _ => {}
    }
    // Bytes that are not UTF-8: wasmgate logs them lossily at the level
    // asked for, the reference logs an error line about them instead. The
    // reference's formatter escapes terminal control characters.
    let comparable = |logs: &[(String, String)], escape: bool| -> Vec<(String, String)> {
        logs.iter()
            .filter(|(_, m)| !m.contains('\u{fffd}') && !m.starts_with("unable to log message"))
            .map(|(level, m)| {
                (
                    level.clone(),
                    if escape {
                        escape_controls(m)
                    } else {
                        m.clone()
                    },
                )
            })
            .collect()
    };
    if comparable(&ours.logs, true) != comparable(&theirs.logs, false) {
        return Some(format!(
            "logs differ:\n  wasmgate: {:?}\n  extism:   {:?}",
            ours.logs, theirs.logs
        ));
    }
    None
}
