//! The host's log level on the scale both plugin ABIs use.

use tracing::level_filters::LevelFilter;

/// The most verbose level the host logs now: 0 trace, 1 debug, 2 info,
/// 3 warn, 4 error (Extism's and Proxy-Wasm's numbering); `None` when
/// logging is off.
pub fn current() -> Option<u32> {
    match LevelFilter::current() {
        LevelFilter::TRACE => Some(0),
        LevelFilter::DEBUG => Some(1),
        LevelFilter::INFO => Some(2),
        LevelFilter::WARN => Some(3),
        LevelFilter::ERROR => Some(4),
        _ => None,
    }
}
