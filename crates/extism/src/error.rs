//! How a call can fail. Messages match the reference runtime where it has one.

use wasmgate_runtime::{AcquireError, CrashReport, FailureKind};

use crate::memory::InputTooLarge;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The reference's message, then the functions that can be called
    /// (`exports`), so a typo is one look away from its fix.
    #[error("Function not found: {name} ({})", callable_list(exports))]
    FunctionNotFound { name: String, exports: Vec<String> },
    #[error("Function {function} has type {signature}; an Extism export takes no parameters and returns nothing or one i32")]
    BadSignature { function: String, signature: String },
    /// The plugin reported an error (`error_set`); the text is the plugin's own.
    #[error("{0}")]
    Plugin(String),
    /// The export returned a non-zero code without setting an error.
    #[error("Returned non-zero exit code: {0}")]
    NonZeroExit(i32),
    /// The plugin called WASI `proc_exit` with a non-zero code.
    #[error("Exited with i32 exit status {0}")]
    Exit(i32),
    /// Trap, timeout, memory cap or host-function failure; the instance was discarded.
    #[error("{0}")]
    Crash(Box<CrashReport>),
    #[error(transparent)]
    Unavailable(#[from] AcquireError),
    #[error(transparent)]
    InputTooLarge(#[from] InputTooLarge),
}

fn callable_list(exports: &[String]) -> String {
    if exports.is_empty() {
        "the plugin exports no function that can be called".to_string()
    } else {
        format!("the plugin exports: {}", exports.join(", "))
    }
}

impl CallError {
    /// A short, stable name for the failure class (used in HTTP error bodies and metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::FunctionNotFound { .. } => "function_not_found",
            CallError::BadSignature { .. } => "bad_signature",
            CallError::Plugin(_) => "plugin_error",
            CallError::NonZeroExit(_) => "plugin_error",
            CallError::Exit(_) => "plugin_exit",
            CallError::Crash(report) => match report.kind {
                FailureKind::Trap => "trap",
                FailureKind::Timeout => "timeout",
                FailureKind::OutOfMemory => "out_of_memory",
                FailureKind::HostError => "host_error",
            },
            CallError::Unavailable(AcquireError::Overloaded { .. }) => "overloaded",
            CallError::Unavailable(AcquireError::BackingOff { .. }) => "backing_off",
            CallError::Unavailable(AcquireError::Instantiate(_)) => "instantiate_failed",
            CallError::InputTooLarge(_) => "input_too_large",
        }
    }

    pub fn crash_report(&self) -> Option<&CrashReport> {
        match self {
            CallError::Crash(report) => Some(report),
            _ => None,
        }
    }
}
