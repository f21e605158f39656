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
//! Only a running node does this ([`enable`]); `wasmgate check` waits for
//! every compile, since it is there to say whether everything compiles.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Woken when a compile left in the background ends.
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
