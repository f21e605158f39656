//! One way to time a closure, used by both sides of a side-by-side
//! benchmark so that their figures are comparable: a warm-up, then several
//! batches sized to a target duration, reporting the median batch.

use std::time::{Duration, Instant};

pub struct Protocol {
    pub warmup: Duration,
    pub batches: usize,
    pub batch_time: Duration,
}

impl Protocol {
    pub const FULL: Protocol = Protocol {
        warmup: Duration::from_millis(300),
        batches: 5,
        batch_time: Duration::from_millis(400),
    };
    pub const QUICK: Protocol = Protocol {
        warmup: Duration::from_millis(50),
        batches: 3,
        batch_time: Duration::from_millis(100),
    };

    /// From the command line: `--quick` selects [`Protocol::QUICK`].
    pub fn from_args() -> &'static Protocol {
        if std::env::args().any(|a| a == "--quick") {
            &Protocol::QUICK
        } else {
            &Protocol::FULL
        }
    }

    /// Median nanoseconds per call of `f`.
    pub fn measure(&self, mut f: impl FnMut()) -> (u64, f64) {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < self.warmup || calls < 3 {
            f();
            calls += 1;
        }
        let per_call = start.elapsed().as_nanos() as f64 / calls as f64;
        let iters = ((self.batch_time.as_nanos() as f64 / per_call) as u64).max(1);
        let mut samples: Vec<f64> = (0..self.batches)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..iters {
                    f();
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            })
            .collect();
        samples.sort_by(|a, b| a.total_cmp(b));
        (iters, samples[samples.len() / 2])
    }
}

/// Prints one result as a JSON line: `{"impl","case","size","iters","ns_per_iter","mib_per_s"}`.
pub fn report(implementation: &str, case: &str, size: usize, iters: u64, ns_per_iter: f64) {
    let mib_per_s = if size > 0 {
        format!(
            "{:.1}",
            size as f64 / (1024.0 * 1024.0) / (ns_per_iter / 1e9)
        )
    } else {
        "null".to_string()
    };
    println!(
        "{{\"impl\":\"{implementation}\",\"case\":\"{case}\",\"size\":{size},\"iters\":{iters},\"ns_per_iter\":{ns_per_iter:.1},\"mib_per_s\":{mib_per_s}}}"
    );
}

/// The payload sizes of the throughput cases: 64 KiB, 640 KiB, 6.25 MiB.
pub const SIZES: [usize; 3] = [65536, 655360, 6553600];

/// A deterministic payload of `size` bytes.
pub fn payload(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[2])
        .collect()
}

/// True when `case` should run, given an optional `--case NAME` filter.
pub fn selected(case: &str) -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--case") {
        Some(i) => args.get(i + 1).is_some_and(|c| c == case),
        None => true,
    }
}
