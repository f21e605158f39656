//! What the host-function fuzzers share (crates/extism/tests/host/fuzz_host/,
//! crates/proxy-wasm/tests/host/fuzz_host/, crates/extism/tests/
//! reference_sequences/): seeded randomness, a log subscriber that formats
//! every event, and numbers from the environment.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// SplitMix64, seeded, so a failing run can be replayed from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u32) as usize]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

static LOG_EVENTS: AtomicU64 = AtomicU64::new(0);

/// Accepts every wasmgate event and formats its fields, so the log host
/// functions run in full (formatting the guest's bytes) rather than being
/// skipped for want of a listener. Install it with
/// `tracing::subscriber::set_global_default(LogSink)`.
pub struct LogSink;

impl LogSink {
    /// Events formatted so far, in this process.
    pub fn events() -> u64 {
        LOG_EVENTS.load(Ordering::Relaxed)
    }
}

struct Visitor(String);

impl tracing::field::Visit for Visitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for LogSink {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("wasmgate")
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut visitor = Visitor(String::new());
        event.record(&mut visitor);
        std::hint::black_box(visitor.0.len());
        LOG_EVENTS.fetch_add(1, Ordering::Relaxed);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The number in environment variable `name` (decimal, or hex with `0x`),
/// or `default`; a variable that is not a number fails the test.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={text} is not a number"))
        }
        Err(_) => default,
    }
}
