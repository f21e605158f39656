//! Why a filter's callback failed ([`FilterError`]), as the gateway sees it.

use std::time::Duration;

use wasmgate_runtime::CrashReport;

/// Why a callback failed: the guest trapped, ran out of time or memory, or
/// refused to start.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{0}")]
    Crash(Box<CrashReport>),
    #[error("filter `{plugin}` is unavailable: {reason}")]
    Unavailable { plugin: String, reason: String },
    /// The filter paused the stream with nothing (no call, no tick) that
    /// could ever resume it.
    #[error("filter `{plugin}` paused the stream in {callback} with no http call or tick pending to resume it")]
    Stalled {
        plugin: String,
        callback: &'static str,
    },
    /// The filter kept the stream paused longer than it may (see
    /// `stream.rs`), e.g. dispatching one http call after another.
    #[error(
        "filter `{plugin}` kept the stream paused in {callback} for {limit:?} without resuming it"
    )]
    PausedTooLong {
        plugin: String,
        callback: &'static str,
        limit: Duration,
    },
}
