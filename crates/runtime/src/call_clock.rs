//! The clock of guest calls: read before and after every call (its budget,
//! its wall and CPU time), so four to eight times a filtered request.
//!
//! quanta reads the CPU's time-stamp counter where it is invariant (and
//! falls back to the monotonic clock where it is not): a few instructions,
//! against about 90 for `std::time::Instant::now` and `Instant - Instant`
//! together (the vDSO's `clock_gettime` and std's timespec arithmetic), which
//! summed to about 700 instructions a request with one filter
//! (`bench/instructions.sh`, "local/rust"). The gateway's filter timings
//! (`chain.rs`) read the same clock.

pub use quanta::Instant;

/// Calibrates the clock now rather than on the first guest call: quanta
/// measures the counter's rate against the OS clock the first time it is
/// read, which takes a moment a request should not wait for.
pub(crate) fn calibrate() {
    let _ = Instant::now();
}
