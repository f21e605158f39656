//! The epoch ticker: one thread per engine advances wasmtime's epoch, which
//! is when running guest code checks its deadline and yields
//! ([`crate::limits`]).
//!
//! The tick is `tick` (1 ms) while guest calls are short (they end before
//! any tick-driven callback) and a quarter of it for 10 ms after a long
//! call yielded. Most long calls leave their worker at their first yield
//! (see `slow_lane`); the faster tick is for those that cannot move
//! (instance start-up: `_start`, `proxy_on_vm_start`, `proxy_on_configure`),
//! which yield in place and so hold their thread for a quarter tick per
//! turn. With the slow lane, R3's figures (docs/reliability.md) did not
//! tell the two tick rates apart. Ticking faster all the time cost ~5 % of
//! throughput (a wake-up every 250 µs on a serving core); only while long
//! calls run, it costs nothing otherwise.
//!
//! **Resting.** A node with no traffic runs no guest code, and a tick every
//! millisecond cost it 16 ms of CPU a second, all wake-ups
//! (docs/benchmarks.md, "Idle"). So when no call has started and no running
//! call has reached a tick for [`QUIET_TICKS`] ticks, the ticker rests: it
//! ticks every [`RESTING_TICK`] until a call starts, and the call wakes it
//! (three relaxed loads per call, a store at most once per tick). What
//! resting can delay: a call that waited in a host function (a Redis
//! command, an HTTP call) for longer than the quiet period and then spins,
//! or one that starts in the instant the ticker goes to rest (the call's
//! look is not a fence), reaches its first yield up to one resting tick
//! late, once; at that tick it wakes the ticker. Deadlines are wall-clock
//! times, so none of them moves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// Ticks without guest code before the ticker rests (100 ms at 1 ms).
pub const QUIET_TICKS: u64 = 100;

/// The tick while resting.
pub const RESTING_TICK: Duration = Duration::from_millis(50);

/// Ticks made so far, by every engine's ticker.
static TICKS: AtomicU64 = AtomicU64::new(0);
/// [`TICKS`] when guest code last showed it runs.
static LAST_SEEN: AtomicU64 = AtomicU64::new(0);
/// Whether a ticker rests (and a starting call should wake them).
static RESTING: AtomicBool = AtomicBool::new(false);
/// The ticker threads, for waking.
static TICKERS: Mutex<Vec<Thread>> = Mutex::new(Vec::new());

/// A guest call starts, or a running one reached a tick. Marks the tick
/// (at most one store per tick, however many calls) and wakes a resting
/// ticker.
#[inline]
pub(crate) fn guest_running() {
    let now = TICKS.load(Ordering::Relaxed);
    if LAST_SEEN.load(Ordering::Relaxed) != now {
        LAST_SEEN.store(now, Ordering::Relaxed);
    }
    if RESTING.load(Ordering::Relaxed) {
        wake();
    }
}

#[cold]
fn wake() {
    if RESTING.swap(false, Ordering::AcqRel) {
        for ticker in lock_tickers().iter() {
            ticker.unpark();
        }
    }
}

fn quiet() -> bool {
    TICKS
        .load(Ordering::Relaxed)
        .wrapping_sub(LAST_SEEN.load(Ordering::Relaxed))
        >= QUIET_TICKS
}

fn lock_tickers() -> std::sync::MutexGuard<'static, Vec<Thread>> {
    TICKERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts `engine`'s ticker; it stops when the engine is dropped.
pub(crate) fn start(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    let busy_tick = tick / 4;
    let busy_for = Duration::from_millis(10);
    let thread = std::thread::Builder::new()
        .name("wasmgate-epoch".into())
        .spawn(move || {
            let mut busy_until = Instant::now();
            loop {
                let now = Instant::now();
                if crate::limits::take_yield_notice() {
                    busy_until = now + busy_for;
                }
                if now >= busy_until && quiet() {
                    RESTING.store(true, Ordering::SeqCst);
                    std::thread::park_timeout(RESTING_TICK);
                    if !RESTING.load(Ordering::Acquire) {
                        // Woken by a call: its first tick comes a full tick
                        // after it started, as when awake.
                        continue;
                    }
                } else {
                    if RESTING.load(Ordering::Relaxed) {
                        RESTING.store(false, Ordering::Relaxed);
                    }
                    let period = if now < busy_until { busy_tick } else { tick };
                    crate::profiler::set_tick(period);
                    std::thread::sleep(period);
                }
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
                TICKS.fetch_add(1, Ordering::Relaxed);
            }
            let me = std::thread::current().id();
            lock_tickers().retain(|ticker| ticker.id() != me);
        })
        .expect("spawning the epoch ticker thread");
    lock_tickers().push(thread.thread().clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node left alone rests its ticker; a starting call wakes it.
    #[test]
    fn the_ticker_rests_when_no_guest_runs_and_wakes_for_a_call() {
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(true)).unwrap();
        start(&engine, Duration::from_millis(1));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !RESTING.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the ticker never rested");
            std::thread::sleep(Duration::from_millis(10));
        }
        guest_running();
        assert!(!RESTING.load(Ordering::Acquire));
        // Awake, it ticks every millisecond again: more than the two
        // resting ticks 100 ms would hold.
        let before = TICKS.load(Ordering::Relaxed);
        let until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < until {
            guest_running();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(TICKS.load(Ordering::Relaxed) - before > 10);
    }
}
