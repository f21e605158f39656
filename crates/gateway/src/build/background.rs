//! Components that compile in the background. A Python component carries
//! CPython (19 MB): its first compile takes about 7 s of an idle two-core
//! machine and was measured at 37-119 s on a busy one. A running node does
//! not make its other routes, or a reload's other changes, wait for that: a
//! component whose compile has not ended within
//! `limits.component_compile_wait_ms` is left compiling, the build goes on
//! without it (its routes answer 503 `plugin_starting`, `endpoint/
//! starting.rs`), and when the compile ends the node reloads
//! ([`LiveGateway::reload_when_compiled`](crate::LiveGateway::reload_when_compiled)).
//! The runtime keeps the compiled component in memory (and in the compile
//! cache), so that reload finds it at once.
//!
//! Filters are left starting the same way: a Proxy-Wasm filter whose start
//! (first instance, `proxy_on_vm_start`, `proxy_on_configure`) has not
//! ended within `limits.filter_start_wait_ms` goes on starting here, its
//! route is served by the filter's version before if there was one, else
//! answers 503 `plugin_starting`, and the node reloads when the start ends,
//! the build then taking the started filter ([`take_started`]) instead of
//! starting it again. One start per filter at a time: a reload while it
//! runs waits for that start ([`filter_starting_since`]).
//!
//! Only a running node does this ([`enable`]); `wasmgate check` waits for
//! every compile and start, since it is there to say whether everything
//! compiles and starts.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::gateway::StartedFilter;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Woken when a compile or filter start left in the background ends.
pub(crate) static COMPILED: Notify = Notify::const_new();

/// Files whose compile ended in the background: a build waits for these
/// in full (they are in the runtime's memory by then), so the reload that
/// follows cannot leave them compiling again.
static FINISHED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Lets this process's builds leave slow component compiles running (a
/// running node; not `check`).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether a build may go on without the component in `path`.
pub(crate) fn may_leave(path: &Path) -> bool {
    ENABLED.load(Ordering::Relaxed)
        && !(FINISHED.lock().expect("finished"))
            .as_ref()
            .is_some_and(|f| f.contains(path))
}

/// Lets `compile` (the plugin `name`'s, of `path`) run on, and reloads the
/// node when it ends, whether it compiled or failed (a failure is then the
/// reload's, reported as any other).
pub(crate) fn finish_later<T: Send + 'static>(
    name: String,
    path: PathBuf,
    compile: tokio::task::JoinHandle<T>,
) {
    tokio::spawn(async move {
        let left_at = std::time::Instant::now();
        let _ = compile.await;
        tracing::info!(plugin = %name, seconds_in_background = left_at.elapsed().as_secs_f64(), "the component's compile ended; rebuilding to serve it");
        (FINISHED.lock().expect("finished"))
            .get_or_insert_with(HashSet::new)
            .insert(path);
        COMPILED.notify_one();
    });
}

/// Filter starts left running, by `filter_key`: since when (Unix ms).
static STARTING: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

/// Filter starts that ended in the background, by `filter_key`: the
/// filter, or why it did not start, for the next build to take.
static STARTED: Mutex<Option<HashMap<String, Result<StartedFilter, String>>>> = Mutex::new(None);

/// Whether a build may go on without a filter still starting.
pub(crate) fn may_leave_filters() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Since when the filter `key` has been starting in the background, if it
/// is: a build then waits for that start rather than making another.
pub(crate) fn filter_starting_since(key: &str) -> Option<u64> {
    (STARTING.lock().expect("starting"))
        .as_ref()?
        .get(key)
        .copied()
}

/// The filter `key` whose start ended in the background, once: the build
/// that takes it serves it (or reports why it did not start).
pub(crate) fn take_started(key: &str) -> Option<Result<StartedFilter, String>> {
    (STARTED.lock().expect("started")).as_mut()?.remove(key)
}

/// Forgets the filters whose start ended in the background that the
/// gateway being installed does not wait for (its configuration changed
/// while they started): each holds a started instance, a heavy plugin's
/// hundreds of MiB, that no build would take.
pub(crate) fn forget_started_but(waited_for: &[crate::gateway::FilterStarting]) {
    if let Some(started) = STARTED.lock().expect("started").as_mut() {
        started.retain(|key, _| waited_for.iter().any(|s| &s.key == key));
    }
}

/// Lets `start` (plugin `plugin`'s filter on `route`) run on; returns
/// since when it runs. When it ends the node reloads, and the build finds
/// the outcome under `key`.
pub(crate) fn start_later(
    plugin: String,
    route: String,
    key: String,
    start: tokio::task::JoinHandle<Result<StartedFilter, String>>,
) -> u64 {
    let since_ms = wasmgate_base::unix_ms();
    (STARTING.lock().expect("starting"))
        .get_or_insert_with(HashMap::new)
        .insert(key.clone(), since_ms);
    tokio::spawn(async move {
        let left_at = std::time::Instant::now();
        let started = start
            .await
            .unwrap_or_else(|e| Err(format!("starting the filter panicked: {e}")));
        tracing::info!(%plugin, %route, seconds_in_background = left_at.elapsed().as_secs_f64(), started = started.is_ok(), "the filter's start ended; rebuilding to serve it");
        (STARTED.lock().expect("started"))
            .get_or_insert_with(HashMap::new)
            .insert(key.clone(), started);
        if let Some(starting) = STARTING.lock().expect("starting").as_mut() {
            starting.remove(&key);
        }
        COMPILED.notify_one();
    });
    since_ms
}
