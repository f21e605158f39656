//! Long guest calls move to threads of their own, at a lower CPU priority
//! that still guarantees them progress.
//!
//! A worker thread serves many connections. A guest call that runs long (a
//! plugin stuck in a loop, or one that is merely heavy) yields every tick, but
//! it still shares its worker with every other request there, and with one
//! such call per core each of those requests waits behind guest time slices.
//!
//! So a call starts on its worker (almost every call ends within
//! microseconds; a hand-off to another thread would cost more than the call),
//! and the first time it yields for having run `CallBudget::LONG_CALL`, it
//! moves to the slow lane: by default one thread per core but one (see
//! [`default_threads`]), each with a single-threaded async runtime. A moved
//! call keeps its deadline; the request that made it awaits its result.
//!
//! **How the lane shares a CPU** (docs/architecture.md, "The slow lane"):
//! its threads run in the normal scheduling class at a raised nice value
//! ([`DEFAULT_NICE`], `limits.long_call_nice`), and give up the CPU at every
//! tick the guest yields at. Two properties follow, on any number of CPUs:
//!
//! - a worker that wakes while a lane thread runs on its CPU waits at most
//!   one tick (the lane thread yields it the CPU at the next tick), and when
//!   both stay busy the kernel gives the lane thread its weight's share:
//!   about two fifths of the CPU against one busy worker at nice 2. So a
//!   stuck call takes a bounded share of a worker's core;
//! - a legitimate long call keeps that share under any load, and all of a
//!   CPU nobody else wants. The idle scheduling class that came before this
//!   (SCHED_IDLE) gave it a few thousandths of a busy CPU: on a one-CPU host
//!   a 35 ms call under load took seconds and ran into its deadline.
//!
//! Only calls that own everything they touch can move ([`GuestCall`] is
//! `'static`): the ABI crates hand over the instance's store for the call and
//! take it back afterwards.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::task::Poll;
use std::time::Duration;

use crate::call_clock::Instant;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A guest call, with what it needs, ready to run on any thread.
pub type GuestCall<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

thread_local! {
    /// Set by the epoch callback when the call it interrupts has run long:
    /// on a worker, read by [`run`] (the call should leave this thread); on
    /// the slow lane, by [`on_lane`] (the thread should yield its CPU).
    static MOVE_REQUESTED: Cell<bool> = const { Cell::new(false) };
}

/// Calls moved to the slow lane since the process started.
static MOVED: AtomicU64 = AtomicU64::new(0);

/// Tells whoever polls the current call that it yielded for having run
/// long: [`run`] moves it off a worker, [`on_lane`] yields the lane thread's
/// CPU. Harmless where nothing reads it: both clear it before each poll.
pub(crate) fn request_move() {
    MOVE_REQUESTED.set(true);
}

/// How many calls have moved to the slow lane so far.
pub fn moved_calls() -> u64 {
    MOVED.load(Ordering::Relaxed)
}

/// A finished call's output, with how long it took and the CPU time it used.
#[derive(Debug)]
pub struct Timed<T> {
    pub output: T,
    /// From the first poll to the end, waits included.
    pub wall: Duration,
    pub cpu: Duration,
}

/// Runs `call` here until it yields for having run long, then on the slow
/// lane. Dropping the returned future cancels the call wherever it runs (on
/// the slow lane: at its next yield, at most one epoch tick later).
///
/// CPU time: on the caller's thread, the time spent polling the call (a
/// worker is rarely preempted by long calls, which run at a lower priority
/// and yield every tick, so this is close to CPU time; a call that ends in
/// one poll, as most do, costs one clock read here); on the slow lane, whose
/// threads share CPUs with workers, the thread's CPU clock around each poll.
/// `started` is when the caller started the call's budget (`CallBudget::start`,
/// just before): the first poll counts from it rather than read the clock
/// again.
///
/// The call comes boxed (it must be, to move after it has been polled here),
/// and boxed by the caller where it is made: taken unboxed, the call's future
/// (wasmtime's call future inside it) was a field of this one, and so of every
/// future awaiting it up to the connection's, and was copied twice per call
/// before reaching its box (fewer data-cache misses without:
/// `bench/instructions.py --cache-sim`).
pub async fn run<T: Send + 'static>(started: Instant, mut call: GuestCall<T>) -> Timed<T> {
    let mut cpu = Duration::ZERO;
    let first_poll = started;
    let mut polled = false;
    // When the last poll here ended (a plain `Instant`, not an `Option`:
    // quanta's has no niche, and the larger future this made was copied
    // twice on its way into the caller's, bench/instructions.py).
    let mut last_clock = first_poll;
    let finished_here = std::future::poll_fn(|cx| {
        MOVE_REQUESTED.set(false);
        let started = match std::mem::replace(&mut polled, true) {
            false => first_poll,
            true => Instant::now(),
        };
        let poll = call.as_mut().poll(cx);
        let now = Instant::now();
        cpu += now - started;
        last_clock = now;
        match poll {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if MOVE_REQUESTED.take() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    if let Some(output) = finished_here {
        let wall = last_clock - first_poll;
        return Timed { output, wall, cpu };
    }
    MOVED.fetch_add(1, Ordering::Relaxed);
    let mut task = AbortOnDrop(lane().spawn(Box::pin(on_lane(call))));
    match (&mut task.0).await {
        Ok((output, lane_cpu)) => Timed {
            output,
            wall: first_poll.elapsed(),
            cpu: cpu + lane_cpu,
        },
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Only `AbortOnDrop` aborts, and then nobody awaits the task.
        Err(error) => unreachable!("slow-lane task ended without a result: {error}"),
    }
}

/// `call` on a slow-lane thread: measures the CPU time of the thread that
/// polls it, and yields the CPU at every tick the call yields at, so that a
/// worker waiting for this CPU runs now instead of after the kernel's slice.
async fn on_lane<T>(mut call: GuestCall<T>) -> (T, Duration) {
    let mut cpu = Duration::ZERO;
    let output = std::future::poll_fn(|cx| {
        MOVE_REQUESTED.set(false);
        let started = thread_cpu_time();
        let poll = call.as_mut().poll(cx);
        cpu += thread_cpu_time().saturating_sub(started);
        if poll.is_pending() && MOVE_REQUESTED.take() {
            rustix::thread::sched_yield();
        }
        poll
    })
    .await;
    (output, cpu)
}

/// The calling thread's CPU time so far.
///
/// Read through libc's `clock_gettime` (the `cpu-time` crate), not rustix's:
/// rustix finds the vDSO by parsing the auxiliary vector itself, which under
/// valgrind raises a signal that callgrind 3.19 aborts on (its assertion in
/// threads.c), and `bench/instructions.sh` counts filters under callgrind
/// with calls that move here. glibc's path is the one valgrind knows.
fn thread_cpu_time() -> Duration {
    cpu_time::ThreadTime::now().as_duration()
}

/// Cancels the slow-lane task when the call's caller goes away.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Slow-lane threads to start; 0 means [`default_threads`].
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many slow-lane threads to start. The lane starts at its first
/// use and keeps its threads, so call this before any plugin runs.
pub fn set_threads(threads: usize) {
    THREADS.store(threads.max(1), Ordering::Relaxed);
}

/// The nice value of slow-lane threads unless [`set_nice`] says otherwise.
/// Against one busy worker (nice 0, weight 1024) a lane thread at nice 2
/// (weight 655) gets about two fifths of a shared CPU. Measured on one CPU
/// under saturating load (docs/reliability.md, R3b), a 6.25 MiB echo took
/// about 3x its time alone at nice 2, up to 4.6x at nice 3 and 6x at nice 5;
/// a spinning call cost other requests a third of their throughput at most
/// and no more than a tick of latency (R3).
pub const DEFAULT_NICE: i32 = 2;

static NICE: AtomicI32 = AtomicI32::new(DEFAULT_NICE);

/// Sets the nice value (0-19) of slow-lane threads: higher leaves more of a
/// busy CPU to request handling and less to long calls. Call before any
/// plugin runs.
pub fn set_nice(nice: i32) {
    NICE.store(nice.clamp(0, 19), Ordering::Relaxed);
}

/// One per CPU but one (at least one): long calls can use all the machine
/// but one core, which stays free for request handling. Measured on 2 cores
/// with a stuck call per core (docs/reliability.md, R3): with both cores
/// taken by slow-lane threads, other requests' p99 went from 0.1 to mostly
/// 1-4 ms; with one core free it stayed under 0.75 ms.
pub fn default_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.saturating_sub(1).max(1)
}

static LANE: OnceLock<SlowLane> = OnceLock::new();

/// The slow-lane threads, started on first use.
struct SlowLane {
    threads: Vec<Handle>,
    next: AtomicUsize,
}

fn lane() -> &'static SlowLane {
    LANE.get_or_init(SlowLane::start)
}

impl SlowLane {
    fn start() -> SlowLane {
        let count = match THREADS.load(Ordering::Relaxed) {
            0 => default_threads(),
            n => n,
        };
        let threads = (0..count).map(start_thread).collect();
        SlowLane {
            threads,
            next: AtomicUsize::new(0),
        }
    }

    /// Round robin: long calls are rare, and a thread's calls share it fairly
    /// by yielding every tick.
    fn spawn<T: Send + 'static>(&self, call: GuestCall<T>) -> JoinHandle<T> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        self.threads[index].spawn(call)
    }
}

fn start_thread(index: usize) -> Handle {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("wasmgate-slow-{index}"))
        .spawn(move || {
            lower_priority();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a slow-lane runtime");
            let _ = handle_tx.send(runtime.handle().clone());
            runtime.block_on(std::future::pending::<()>());
        })
        .expect("starting a slow-lane thread");
    handle_rx
        .recv()
        .expect("the slow-lane thread reports its runtime")
}

/// Raises the calling thread's nice value (on Linux a per-thread setting;
/// raising it needs no privilege). Why a nice value and not the idle class:
/// see the module docs. Why not a lower nice with a host-enforced budget:
/// an unprivileged thread may raise its nice value or enter SCHED_IDLE but
/// never come back, so only a fixed setting is possible.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let nice = NICE.load(Ordering::Relaxed);
        // PRIO_PROCESS with a thread id: on Linux, the thread's own nice value.
        let result = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice);
        if let Err(error) = result {
            tracing::warn!(
                error = %std::io::Error::from(error),
                nice,
                "could not lower the slow lane's CPU priority; long guest calls will compete with request handling"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a guest call: pending `yields` times, asking to move
    /// each time, and reports the thread it ended on.
    fn call_that_yields(yields: usize, ask_to_move: bool) -> GuestCall<String> {
        let mut left = yields;
        Box::pin(std::future::poll_fn(move |cx| {
            if left == 0 {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                return Poll::Ready(name);
            }
            left -= 1;
            if ask_to_move {
                request_move();
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }))
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_call_that_does_not_ask_stays_on_its_thread() {
        let here = std::thread::current().name().unwrap_or("").to_owned();
        assert_eq!(
            block_on(run(Instant::now(), call_that_yields(3, false))).output,
            here
        );
    }

    #[test]
    fn a_call_that_asks_to_move_finishes_on_the_slow_lane() {
        let before = moved_calls();
        let thread = block_on(run(Instant::now(), call_that_yields(3, true))).output;
        assert!(thread.starts_with("wasmgate-slow-"), "ran on {thread}");
        assert!(moved_calls() > before);
    }

    #[test]
    fn cpu_time_counts_on_both_threads() {
        // Spins 20 ms of CPU on this thread, asks to move, spins 20 ms
        // there (by the thread's CPU clock: the slow lane may be preempted).
        let mut polls = 0;
        let call: GuestCall<()> = Box::pin(std::future::poll_fn(move |cx| {
            let started = thread_cpu_time();
            while thread_cpu_time() - started < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            polls += 1;
            if polls == 2 {
                return Poll::Ready(());
            }
            request_move();
            cx.waker().wake_by_ref();
            Poll::Pending
        }));
        let timed = block_on(run(Instant::now(), call));
        assert!(timed.cpu >= Duration::from_millis(40), "{timed:?}");
        assert!(timed.wall >= timed.cpu, "{timed:?}");
    }

    #[test]
    fn dropping_a_moved_call_cancels_it() {
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        // Pending forever once moved, holding `flag`.
        let mut first = true;
        let call: GuestCall<()> = Box::pin(std::future::poll_fn(move |cx| {
            let _hold = &flag;
            if std::mem::take(&mut first) {
                request_move();
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }));
        block_on(async {
            let _ = tokio::time::timeout(
                std::time::Duration::from_millis(20),
                run(Instant::now(), call),
            )
            .await;
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the slow lane kept the call"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
