//! Per-store resource limits: a memory cap and a call deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::call_clock::Instant;

use crate::stats::PluginStats;
use crate::{profiler, slow_lane};
use wasmtime::{ResourceLimiter, StoreContextMut, UpdateDeadline};

/// Caps the total linear memory (all memories of one store together) and the
/// size of tables. Growth past the cap fails the running call with
/// [`MemoryCapExceeded`] instead of letting the guest limp on, so the failure
/// is reported as what it is.
#[derive(Debug)]
pub struct MemoryLimiter {
    max_bytes: Option<usize>,
    max_table_elements: usize,
    committed: usize,
    exceeded: bool,
    exempt_next_growth: bool,
    /// The plugin's statistics, whose memory gauge this store adds to.
    stats: Option<Arc<PluginStats>>,
}

/// The error that ends a call whose plugin grew memory past its cap.
#[derive(Debug, thiserror::Error)]
#[error("memory cap exceeded: the plugin asked for {requested} bytes of linear memory, its limit is {limit} bytes")]
pub struct MemoryCapExceeded {
    pub requested: usize,
    pub limit: usize,
}

impl MemoryLimiter {
    /// `max_bytes: None` leaves memory limited only by wasm32 and the pool slot.
    pub fn new(max_bytes: Option<usize>) -> MemoryLimiter {
        MemoryLimiter {
            max_bytes,
            max_table_elements: 1_000_000,
            committed: 0,
            exceeded: false,
            exempt_next_growth: false,
            stats: None,
        }
    }

    /// Counts this store's linear memory in `stats` (until the store is dropped).
    pub fn counted_in(mut self, stats: Arc<PluginStats>) -> MemoryLimiter {
        self.stats = Some(stats);
        self
    }

    pub fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// Bytes of linear memory this store holds now.
    pub fn committed_bytes(&self) -> usize {
        self.committed
    }

    /// Leaves the next memory growth (or memory creation) out of the cap and
    /// the count: for memory the host manages under a limit of its own, like
    /// an Extism kernel's. Call [`MemoryLimiter::end_exemption`] after the
    /// growth, whether or not it happened.
    pub fn exempt_next_growth(&mut self) {
        self.exempt_next_growth = true;
    }

    pub fn end_exemption(&mut self) {
        self.exempt_next_growth = false;
    }

    /// Ends the start-up, which may have had a cap of its own: from now on
    /// growth is held to `call_limit`, or to what the start left if that is
    /// more. A Wasm memory never shrinks, so memory the start needed (a WAF
    /// compiling its rules) is not a later call's fault; growing past it is.
    pub fn started(&mut self, call_limit: Option<usize>) {
        self.max_bytes = call_limit.map(|limit| limit.max(self.committed));
    }

    /// True once a growth was refused; the instance should not be reused.
    pub fn exceeded(&self) -> bool {
        self.exceeded
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        if let Some(stats) = &self.stats {
            stats.memory_released(self.committed as u64);
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if std::mem::take(&mut self.exempt_next_growth) {
            return Ok(true);
        }
        let after = self.committed - current.min(self.committed) + desired;
        if let Some(limit) = self.max_bytes {
            if after > limit {
                self.exceeded = true;
                return Err(MemoryCapExceeded {
                    requested: after,
                    limit,
                }
                .into());
            }
        }
        if let Some(stats) = &self.stats {
            stats.memory_grew(after.saturating_sub(self.committed) as u64);
        }
        self.committed = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.max_table_elements)
    }
}

/// A call's time budget, kept in the store data of every ABI.
///
/// The engine's ticker advances the epoch every tick, and every tick wasmtime
/// calls [`CallBudget::on_epoch`]: past the call's deadline the call is
/// interrupted; once it has run [`CallBudget::LONG_CALL`] it yields at every
/// tick, which moves it to the slow lane (see [`crate::slow_lane`]) and, where
/// it cannot move, lets the other tasks on its thread run.
#[derive(Debug)]
pub struct CallBudget {
    deadline: Option<Instant>,
    /// When the current call started.
    started: Instant,
    /// Time the current call spent suspended in host functions that wait on
    /// the network (a database, an outbound request). It does not count
    /// towards a long call: a call that waits for PostgreSQL uses no CPU,
    /// and moving it to the slow lane would only cost hand-offs.
    waited: Duration,
    timed_out: bool,
    /// While profiling: ticks to let pass before the next sample, so that
    /// taking samples costs at most ~10 % of the guest's time (see
    /// `after_sample`). Counted across calls: short calls see few ticks.
    ticks_to_skip: u64,
}

impl Default for CallBudget {
    fn default() -> Self {
        CallBudget::new()
    }
}

/// Store data that carries a [`CallBudget`].
pub trait HasCallBudget {
    fn call_budget(&mut self) -> &mut CallBudget;
    /// The plugin's name, which CPU profiles file samples under.
    fn plugin_name(&self) -> &str;
}

impl CallBudget {
    /// A call that has run this long is a long call. A call that merely
    /// straddles a tick is not: moving or yielding it would cost more than it
    /// saves.
    pub const LONG_CALL: Duration = Duration::from_millis(1);

    pub fn new() -> CallBudget {
        CallBudget {
            deadline: None,
            started: Instant::now(),
            waited: Duration::ZERO,
            timed_out: false,
            ticks_to_skip: 0,
        }
    }

    /// Starts a call that may run for `timeout` (or forever with `None`).
    /// Returns the epoch deadline, in ticks from now, for `Store::set_epoch_deadline`.
    pub fn start(&mut self, timeout: Option<Duration>) -> u64 {
        let now = Instant::now();
        self.started = now;
        self.waited = Duration::ZERO;
        self.deadline = timeout.map(|t| now + t);
        self.timed_out = false;
        crate::ticker::guest_running();
        1
    }

    /// Whether this tick is a sample (false while skipping ticks after a
    /// costly one).
    fn sample_due(&mut self) -> bool {
        match self.ticks_to_skip {
            0 => true,
            _ => {
                self.ticks_to_skip -= 1;
                false
            }
        }
    }

    /// A sample took `cost`: skip enough ticks that sampling stays under
    /// ~10 % of guest time. Capturing a stack symbolizes it with the
    /// module's DWARF, which takes milliseconds for modules that carry full
    /// debug info and microseconds for stripped ones (then every tick is a
    /// sample).
    fn after_sample(&mut self, cost: Duration) {
        let tick = profiler::tick().as_nanos().max(1);
        self.ticks_to_skip = ((cost.as_nanos() * 9) / tick).min(1000) as u64;
    }

    /// When the current call started (set by [`CallBudget::start`]).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Time left before the deadline (`None`: no deadline).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Records that the call spent `waited` suspended in a host function,
    /// waiting on the network rather than running (see the field).
    pub fn add_wait(&mut self, waited: Duration) {
        self.waited += waited;
    }

    /// Records that a host function gave up because the call's deadline passed.
    pub fn mark_timed_out(&mut self) {
        self.timed_out = true;
    }

    /// True if the last call was interrupted at its deadline.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    fn on_epoch(&mut self) -> UpdateDeadline {
        crate::ticker::guest_running();
        let now = Instant::now();
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            self.timed_out = true;
            return UpdateDeadline::Interrupt;
        }
        if (now - self.started).saturating_sub(self.waited) < Self::LONG_CALL {
            return UpdateDeadline::Continue(1);
        }
        YIELDED.store(true, Ordering::Relaxed);
        // Under `slow_lane::run` on a worker, this yield moves the call to
        // the slow lane.
        slow_lane::request_move();
        // tokio's yield_now defers the wake-up until the scheduler has polled
        // its timers and sockets, so a spinning plugin cannot keep them
        // waiting (a plain re-wake would run again first).
        UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
    }
}

/// Set when a long call yields; the epoch ticker then ticks faster for a
/// while (see `ticker`).
static YIELDED: AtomicBool = AtomicBool::new(false);

/// Whether a long call yielded since the last look (and clears the notice).
pub(crate) fn take_yield_notice() -> bool {
    YIELDED.swap(false, Ordering::Relaxed)
}

/// Installs the deadline/yield policy on a store; call once per store.
pub fn install_epoch_policy<T: HasCallBudget + 'static>(store: &mut wasmtime::Store<T>) {
    store.epoch_deadline_callback(|mut ctx: StoreContextMut<'_, T>| {
        let update = ctx.data_mut().call_budget().on_epoch();
        if profiler::recording()
            && !matches!(update, UpdateDeadline::Interrupt)
            && ctx.data_mut().call_budget().sample_due()
        {
            let started = std::time::Instant::now();
            let backtrace = wasmtime::WasmBacktrace::capture(&ctx);
            profiler::sample(ctx.data().plugin_name(), &backtrace, started);
            ctx.data_mut().call_budget().after_sample(started.elapsed());
        }
        Ok(update)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_started_instance_is_held_to_the_call_cap_or_to_what_its_start_left() {
        // The start may take 3 MiB; the calls' cap is 2 MiB.
        let mut limiter = MemoryLimiter::new(Some(3 * MIB));
        assert!(limiter.memory_growing(0, 3 * MIB, None).is_ok());
        limiter.started(Some(2 * MIB));
        assert_eq!(limiter.max_bytes(), Some(3 * MIB));
        assert!(limiter
            .memory_growing(3 * MIB, 3 * MIB + 65536, None)
            .is_err());
        assert!(limiter.exceeded());

        // A start that stayed under the calls' cap leaves the calls room to grow.
        let mut limiter = MemoryLimiter::new(Some(3 * MIB));
        assert!(limiter.memory_growing(0, MIB, None).is_ok());
        limiter.started(Some(2 * MIB));
        assert_eq!(limiter.max_bytes(), Some(2 * MIB));
        assert!(limiter.memory_growing(MIB, 2 * MIB, None).is_ok());
        assert!(limiter
            .memory_growing(2 * MIB, 2 * MIB + 65536, None)
            .is_err());

        // No call cap: the calls are not capped.
        let mut limiter = MemoryLimiter::new(Some(MIB));
        limiter.started(None);
        assert_eq!(limiter.max_bytes(), None);
    }
}
