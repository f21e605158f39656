//! A sampling CPU profiler for guest code, built on the epoch ticker.
//!
//! While a profile is recording, running guest calls stop at epoch ticks
//! (1 ms by default) in their epoch callback, which captures the wasm stack
//! and counts it under the plugin's name. Samples land where the guest is
//! when a tick falls, so a profile is a statistical picture of where wasm
//! time goes; a call shorter than a tick shows up in proportion to how often
//! a tick lands inside it. Host functions appear as the wasm frame that
//! called them.
//!
//! Capturing a stack symbolizes it, which costs microseconds for a stripped
//! module and milliseconds for one with full DWARF. Each store measures
//! what its samples cost and spaces the next one so sampling takes at most
//! ~10 % of the call's time (every tick when samples are cheap).
//!
//! When no profile is recording, the cost is one relaxed atomic load when a
//! call starts and at each time-slice end, which is why the profiler is
//! always compiled in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wasmtime::WasmBacktrace;

static RECORDING: AtomicBool = AtomicBool::new(false);
/// The epoch tick, in ns (set by the runtime; 1 ms until then).
static TICK_NANOS: AtomicU64 = AtomicU64::new(1_000_000);
static SESSION: Mutex<Option<Session>> = Mutex::new(None);

struct Session {
    /// Only this plugin's calls are sampled; all plugins when None.
    plugin: Option<String>,
    /// Folded stack (`plugin;outer;...;inner`) -> samples.
    stacks: HashMap<String, u64>,
    /// Time spent taking samples (stack capture and symbolization).
    sampling: Duration,
}

/// What a finished recording found.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// `plugin;outermost;...;innermost` and its sample count, sorted.
    pub stacks: Vec<(String, u64)>,
    /// What taking the samples cost the profiled calls, in total.
    pub sampling: Duration,
}

impl Profile {
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// The "folded stacks" text flame graph tools read: one
    /// `frame;frame;frame count` line per distinct stack.
    pub fn folded(&self) -> String {
        let mut out = String::new();
        for (stack, count) in &self.stacks {
            out.push_str(stack);
            out.push(' ');
            out.push_str(&count.to_string());
            out.push('\n');
        }
        out
    }
}

/// Starts recording (of `plugin`, or every plugin). Fails if a recording
/// is already running: there is one profiler per process.
pub fn start(plugin: Option<String>) -> Result<(), &'static str> {
    let mut session = SESSION.lock().unwrap();
    if session.is_some() {
        return Err("a profile is already being recorded");
    }
    *session = Some(Session {
        plugin,
        stacks: HashMap::new(),
        sampling: Duration::ZERO,
    });
    RECORDING.store(true, Ordering::Release);
    Ok(())
}

/// Ends the recording and returns what it sampled.
pub fn stop() -> Profile {
    RECORDING.store(false, Ordering::Release);
    let Some(session) = SESSION.lock().unwrap().take() else {
        return Profile::default();
    };
    let mut stacks: Vec<(String, u64)> = session.stacks.into_iter().collect();
    stacks.sort();
    Profile {
        stacks,
        sampling: session.sampling,
    }
}

/// Records the epoch ticker's period (samples are spaced in ticks).
pub(crate) fn set_tick(tick: Duration) {
    TICK_NANOS.store(tick.as_nanos() as u64, Ordering::Relaxed);
}

pub(crate) fn tick() -> Duration {
    Duration::from_nanos(TICK_NANOS.load(Ordering::Relaxed))
}

/// Whether calls should stop at every tick to be sampled.
#[inline]
pub(crate) fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Counts the stack of a running call of `plugin`; `started` is when the
/// capture began, so the profile can say what sampling cost.
pub(crate) fn sample(plugin: &str, backtrace: &WasmBacktrace, started: Instant) {
    let mut guard = SESSION.lock().unwrap();
    let Some(session) = guard.as_mut() else {
        return;
    };
    if session.plugin.as_deref().is_some_and(|p| p != plugin) {
        return;
    }
    let mut frames: Vec<String> = Vec::new();
    // Innermost first in the backtrace; a machine frame may hold several
    // inlined source frames, also innermost first.
    for frame in backtrace.frames() {
        let symbols = frame.symbols();
        if symbols.is_empty() {
            // Without DWARF the name section's (mangled) name is all there is.
            frames.push(match frame.func_name() {
                Some(name) => crate::crash::readable_name(name),
                None => format!("wasm-function[{}]", frame.func_index()),
            });
        } else {
            frames.extend(symbols.iter().map(|s| {
                s.name()
                    .map_or_else(|| "<unknown>".to_string(), crate::crash::readable_name)
            }));
        }
    }
    let mut stack = plugin.replace(';', ":");
    for frame in frames.iter().rev() {
        stack.push(';');
        // `;` separates frames and a space ends the stack in folded format.
        stack.push_str(&frame.replace([';', ' '], "_"));
    }
    *session.stacks.entry(stack).or_insert(0) += 1;
    session.sampling += started.elapsed();
}
