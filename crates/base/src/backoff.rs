//! The one backoff every retry loop uses: exponential, capped, with jitter.
//!
//! Without jitter, everything that failed at the same moment retries at the
//! same moments: after an etcd restart every node of a cluster reconnected
//! in lock-step, and a plugin's instances that failed together came back
//! together. Each delay here is drawn from `[d, 2d)` of the doubling delay
//! `d` (the `backon` crate's exponential backoff with jitter), so retries
//! spread out while the waits still grow.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
}

impl Backoff {
    /// Delays from about `first`, doubling, to about `max` (each up to twice
    /// that with jitter), for as long as failures go on.
    pub fn new(first: Duration, max: Duration) -> Backoff {
        let builder = ExponentialBuilder::default()
            .with_min_delay(first)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Backoff {
            delays: builder.build(),
            builder,
        }
    }

    /// How long to wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.delays
            .next()
            .expect("a backoff without a maximum number of attempts never ends")
    }

    /// After a success: the next failure starts again from `first`.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_start_over_after_a_reset() {
        let (first, max) = (Duration::from_millis(100), Duration::from_secs(5));
        let mut backoff = Backoff::new(first, max);
        let delays: Vec<Duration> = (0..12).map(|_| backoff.next_delay()).collect();
        for (i, delay) in delays.iter().enumerate() {
            let base = (first * 2u32.pow(i as u32)).min(max);
            assert!(*delay >= base && *delay < base * 2, "{i}: {delay:?}");
        }
        // Two backoffs do not wait the same times (jitter).
        let mut other = Backoff::new(first, max);
        let others: Vec<Duration> = (0..12).map(|_| other.next_delay()).collect();
        assert_ne!(delays, others);
        backoff.reset();
        assert!(backoff.next_delay() < first * 2);
    }
}
