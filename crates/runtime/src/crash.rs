//! What went wrong in a failed call, in words an operator can act on.

use std::fmt;

use serde::Serialize;
use wasmtime::{Trap, WasmBacktrace};

use crate::limits::MemoryCapExceeded;

/// The class of a failed call. Each maps to one status code and one metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A wasm trap (`unreachable`, out-of-bounds access, ...): the message says which.
    Trap,
    /// The call ran past its deadline and was interrupted.
    Timeout,
    /// The plugin grew its memory past its cap.
    OutOfMemory,
    /// A host function refused the call (bad pointer, denied capability, ...).
    HostError,
}

impl FailureKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureKind::Trap => "trap",
            FailureKind::Timeout => "timeout",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::HostError => "host_error",
        }
    }
}

/// One wasm stack frame, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// A failed call: which plugin and function, what kind of failure, the
/// engine's message and the wasm backtrace (with file:line when the module
/// carries DWARF).
#[derive(Clone, Debug, Serialize)]
pub struct CrashReport {
    pub plugin: String,
    pub function: String,
    pub kind: FailureKind,
    pub message: String,
    pub frames: Vec<Frame>,
    /// The request whose call failed, when the call served one: what its
    /// error answer names, so the report can be found from it (the answer
    /// itself does not show the report unless the operator asks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
}

impl CrashReport {
    /// Classifies an error returned by a wasmtime call. `timed_out` comes from
    /// the store's [`crate::CallBudget`], which knows whether an interrupt was a deadline.
    pub fn from_error(
        plugin: &str,
        function: &str,
        error: &wasmtime::Error,
        timed_out: bool,
    ) -> Self {
        let trap = error.downcast_ref::<Trap>().copied();
        let kind = if timed_out || trap == Some(Trap::Interrupt) {
            FailureKind::Timeout
        } else if error.chain().any(|e| e.is::<MemoryCapExceeded>()) {
            FailureKind::OutOfMemory
        } else if trap.is_some() {
            FailureKind::Trap
        } else {
            FailureKind::HostError
        };
        let message = match (&kind, trap) {
            (FailureKind::Timeout, _) => "the call exceeded its deadline".to_string(),
            (_, Some(trap)) => trap.to_string(),
            _ => root_message(error),
        };
        let frames = error
            .downcast_ref::<WasmBacktrace>()
            .map(frames_of)
            .unwrap_or_default();
        CrashReport {
            plugin: plugin.to_string(),
            function: function.to_string(),
            kind,
            message,
            frames,
            request_id: None,
        }
    }

    /// Describes a failure while making an instance (`stage`: "instantiation",
    /// "start-up", ...): a trap becomes a crash report with its frames,
    /// anything else keeps its own message.
    pub fn start_failure(plugin: &str, stage: &str, error: wasmtime::Error) -> anyhow::Error {
        if error.downcast_ref::<Trap>().is_some()
            || error.downcast_ref::<wasmtime_wasi::I32Exit>().is_some()
        {
            anyhow::anyhow!("{}", CrashReport::from_error(plugin, stage, &error, false))
        } else {
            anyhow::Error::from(error).context(format!("plugin `{plugin}` {stage} failed"))
        }
    }

    /// The innermost frame that has a source location, if any.
    pub fn origin(&self) -> Option<&Frame> {
        self.frames.iter().find(|f| f.file.is_some())
    }
}

/// The most specific message in an error chain, without wasmtime's backtrace dump.
fn root_message(error: &wasmtime::Error) -> String {
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        // AssemblyScript's abort() and C's exit() end here: say it in the
        // plugin's terms rather than WASI's.
        return format!("the plugin exited with status {} (WASI proc_exit)", exit.0);
    }
    if error.downcast_ref::<WasmBacktrace>().is_some() {
        error.root_cause().to_string()
    } else {
        error.to_string()
    }
}

/// A function's name as people read it: Rust names (legacy `_ZN...17h...E`
/// and v0 `_R...`) without their hash, C++ names (`_Z...`) demangled;
/// anything else, or a name that does not demangle, as it is.
pub fn readable_name(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        let demangled = cpp_demangle::Symbol::new(name)
            .ok()
            .and_then(|symbol| symbol.demangle().ok());
        if let Some(cpp) = demangled {
            return cpp;
        }
    }
    name.to_string()
}

fn frames_of(backtrace: &WasmBacktrace) -> Vec<Frame> {
    let mut frames = Vec::new();
    for info in backtrace.frames() {
        let fallback = info
            .func_name()
            .map(readable_name)
            .unwrap_or_else(|| format!("wasm-function[{}]", info.func_index()));
        if info.symbols().is_empty() {
            frames.push(Frame {
                function: fallback,
                file: None,
                line: None,
                column: None,
            });
            continue;
        }
        // With inlining one machine frame holds several source frames.
        for symbol in info.symbols() {
            frames.push(Frame {
                function: symbol
                    .name()
                    .map(readable_name)
                    .unwrap_or_else(|| fallback.clone()),
                file: symbol.file().map(str::to_string),
                line: symbol.line(),
                column: symbol.column(),
            });
        }
    }
    frames
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugin `{}` function `{}` failed ({}",
            self.plugin,
            self.function,
            self.kind.as_str(),
        )?;
        if let Some(id) = self.request_id {
            write!(f, ", request {id}")?;
        }
        write!(f, "): {}", self.message)?;
        for frame in &self.frames {
            write!(f, "\n    at {}", frame.function)?;
            if let Some(file) = &frame.file {
                write!(f, " ({file}")?;
                if let Some(line) = frame.line {
                    write!(f, ":{line}")?;
                    if let Some(col) = frame.column {
                        write!(f, ":{col}")?;
                    }
                }
                write!(f, ")")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::readable_name;

    #[test]
    fn rust_and_cpp_names_are_demangled() {
        for (mangled, readable) in [
            (
                "_ZN6faults4trap5inner17h0123456789abcdefE",
                "faults::trap::inner",
            ),
            ("_RNvNtCs1234_3std7process5abort", "std::process::abort"),
            (
                "_ZN10add_header9AddHeader10on_requestEv",
                "add_header::AddHeader::on_request()",
            ),
            ("_Z3addii", "add(int, int)"),
            ("proxy_on_request_headers", "proxy_on_request_headers"),
            ("_Znot valid", "_Znot valid"),
        ] {
            assert_eq!(readable_name(mangled), readable, "{mangled}");
        }
    }
}
