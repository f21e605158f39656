//! Request ids: unique within the process, given to every request that may
//! need one (a filter's `request.id`, an error answer, a crash report, so
//! that one can be found from the other).
//!
//! They are made without a shared counter: one that every worker thread
//! incremented would move its cache line between cores on every request.
//! Each thread takes a block of 2^32 ids from a process-wide counter when it
//! needs one, and counts within it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const BLOCK_BITS: u32 = 32;

/// A new request id (never 0: filters' root contexts use 0 for "none").
pub fn next() -> u64 {
    static BLOCKS: AtomicU64 = AtomicU64::new(0);
    thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    NEXT.with(|next| {
        let mut id = next.get();
        if id & ((1 << BLOCK_BITS) - 1) == 0 {
            let block = BLOCKS.fetch_add(1, Ordering::Relaxed);
            id = (block << BLOCK_BITS) | 1;
        }
        next.set(id + 1);
        id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_threads_and_never_zero() {
        let ids: Vec<u64> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..1000).map(|_| next()).collect::<Vec<u64>>()))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let unique: std::collections::HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len());
        assert!(!unique.contains(&0));
    }
}
