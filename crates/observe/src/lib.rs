//! What wasmgate tells about each request, apart from its metrics: the
//! access log, one line per request ([`access_log`]). Its writing happens
//! on a thread of its own, so a slow disk costs a request nothing but a
//! queue slot, and a full queue costs a counted line, never a wait.

pub mod access_log;

pub use access_log::{AccessLog, Entry, FilterTime, Format, LogStats, Target};
