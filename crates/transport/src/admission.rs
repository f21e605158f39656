//! Each listener's connections: how many are open, the cap on them
//! (`max_connections`: past it a new connection is closed as soon as it is
//! accepted, as nginx does past `worker_connections`), and how many were
//! refused or closed by the HTTP/2 rules of `stream_watch.rs`. One set of
//! counters per listening address, shared by every worker thread, read by
//! `/metrics` and `/status`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Why the gateway closed a connection its client kept.
#[derive(Clone, Copy, Debug)]
pub enum CloseReason {
    /// HTTP/2 with no open stream for the idle timeout.
    IdleTimeout = 0,
    /// Its client canceled most of its streams (rapid reset).
    CanceledStreams = 1,
}

pub struct ListenerCounters {
    address: String,
    max: AtomicUsize,
    open: AtomicUsize,
    refused: AtomicU64,
    closed: [AtomicU64; 2],
    /// Told whenever the last open connection ends (shutdown waits on it).
    drained: tokio::sync::Notify,
}

/// A connection counted as open until dropped.
pub struct Admitted(Arc<ListenerCounters>);

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl ListenerCounters {
    /// Counts a new connection in, or refuses it (`None`) at the cap.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let max = self.max.load(Ordering::Relaxed);
        if self.open.fetch_add(1, Ordering::AcqRel) >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Admitted(self.clone()))
    }

    pub fn closed(&self, reason: CloseReason) {
        self.closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Returns once no connection of this listener is open.
    pub async fn drained(&self) {
        loop {
            let drained = self.drained.notified();
            if self.open.load(Ordering::Acquire) == 0 {
                return;
            }
            drained.await;
        }
    }
}

static LISTENERS: Mutex<Vec<Arc<ListenerCounters>>> = Mutex::new(Vec::new());

/// The counters of the listener at `address`, capped at `max` open
/// connections (registered on first use; a later call sets the cap).
pub fn listener(address: &str, max: usize) -> Arc<ListenerCounters> {
    let mut listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = listeners.iter().find(|l| l.address == address) {
        found.max.store(max, Ordering::Relaxed);
        return found.clone();
    }
    let counters = Arc::new(ListenerCounters {
        address: address.to_string(),
        max: AtomicUsize::new(max),
        open: AtomicUsize::new(0),
        refused: AtomicU64::new(0),
        closed: [AtomicU64::new(0), AtomicU64::new(0)],
        drained: tokio::sync::Notify::new(),
    });
    listeners.push(counters.clone());
    counters
}

/// What `/metrics` and `/status` show of one listener.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ListenerCount {
    pub address: String,
    pub open_connections: usize,
    pub max_connections: usize,
    pub refused: u64,
    pub closed_idle: u64,
    pub closed_canceled_streams: u64,
}

/// Every listener's counts, in the order they started.
pub fn listener_counts() -> Vec<ListenerCount> {
    let listeners = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    listeners
        .iter()
        .map(|l| ListenerCount {
            address: l.address.clone(),
            open_connections: l.open.load(Ordering::Relaxed),
            max_connections: l.max.load(Ordering::Relaxed),
            refused: l.refused.load(Ordering::Relaxed),
            closed_idle: l.closed[CloseReason::IdleTimeout as usize].load(Ordering::Relaxed),
            closed_canceled_streams: l.closed[CloseReason::CanceledStreams as usize]
                .load(Ordering::Relaxed),
        })
        .collect()
}
