//! Every watch's loop, and how each one is doing (`/status`, `/cluster`,
//! the dashboard).
//!
//! kube-runtime's watcher re-lists after `410 Expired` on its next poll, but
//! its `default_backoff()` waits before every poll after any error, a 410
//! included, and its waits grow to 30 s while the API server is away. After
//! an API server restart every watch's first reconnect is told 410 (its
//! resource version is older than the new server's watch cache), so each
//! waited out a long delay, reconnected, was told 410, and waited again
//! before re-listing: new routes took 30-87 s to serve. Here a 410 is
//! re-listed at once, and other errors wait from 250 ms up to about 5 s
//! (base's backoff; twice that at most with jitter), so a node is back
//! within seconds of its API server.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use kube::runtime::watcher;
use serde::Serialize;
use wasmgate_base::backoff::Backoff;

/// First and largest wait between a failed watch and its next attempt.
const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// A retried watch that has been quiet this long is open: one that cannot
/// open fails within the client's connect timeout ([`CONNECT_TIMEOUT`]),
/// and a watch that opens says nothing until something changes.
const QUIET_MEANS_OPEN: Duration = Duration::from_secs(6);

/// The Kubernetes client's connect timeout (kube's default is 30 s, which
/// would hide an unreachable API server from `/status` for as long).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The health of every watch of one node, by name (`HTTPRoute`,
/// `Secret default/example-tls`).
#[derive(Default)]
pub struct Watches {
    entries: Mutex<BTreeMap<String, Health>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Health {
    /// `starting` (no answer yet), `watching`, or `retrying` (the last
    /// attempt failed; the next one is under way).
    pub state: &'static str,
    /// When it entered that state (Unix ms).
    pub since_ms: u64,
    /// The last failure's words, kept after it recovers.
    pub last_error: Option<String>,
    pub errors: u64,
    /// Re-lists because the API server no longer had the watch's resource
    /// version (`410 Expired`, after a restart or compaction).
    pub relists: u64,
}

impl Watches {
    /// `/status`'s `config.kubernetes.watches` and `/cluster`'s `watches`.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::to_value(&*self.entries.lock().expect("watches")).unwrap_or_default()
    }

    /// How many watches are not `watching`.
    pub fn unhealthy(&self) -> usize {
        (self.entries.lock().expect("watches").values())
            .filter(|h| h.state != "watching")
            .count()
    }

    /// A watch that is no longer kept (a Secret no longer named).
    pub fn forget(&self, name: &str) {
        self.entries.lock().expect("watches").remove(name);
    }

    /// Starts keeping `name`'s health.
    fn register(&self, name: &str) {
        self.entries.lock().expect("watches").insert(
            name.to_string(),
            Health {
                state: "starting",
                since_ms: now_ms(),
                last_error: None,
                errors: 0,
                relists: 0,
            },
        );
    }

    /// Changes a kept entry; one forgotten stays so (a stopped Secret
    /// watch's task may still report once after its abort).
    fn update(&self, name: &str, change: impl FnOnce(&mut Health)) {
        let mut entries = self.entries.lock().expect("watches");
        let Some(health) = entries.get_mut(name) else {
            return;
        };
        let before = health.state;
        change(health);
        if health.state != before {
            health.since_ms = now_ms();
        }
    }

    fn watching(&self, name: &str) {
        self.update(name, |h| {
            if h.state == "retrying" {
                tracing::info!(watch = name, "watching the API server again");
            }
            h.state = "watching";
        });
    }

    /// Runs `stream` (a kube watcher's, without kube's backoff) for as long
    /// as it lasts, handing each item to `on`, keeping `name`'s health and
    /// waiting between failed attempts.
    pub async fn drive<T>(
        &self,
        name: &str,
        stream: impl Stream<Item = Result<T, watcher::Error>>,
        mut on: impl FnMut(Result<T, &watcher::Error>),
    ) {
        self.register(name);
        futures_util::pin_mut!(stream);
        let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY);
        let mut retried = false;
        loop {
            // After a failure, a watch that stays quiet has opened.
            let next = match retried {
                false => stream.next().await,
                true => match tokio::time::timeout(QUIET_MEANS_OPEN, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        retried = false;
                        self.watching(name);
                        backoff.reset();
                        continue;
                    }
                },
            };
            let Some(item) = next else { return };
            match item {
                Ok(item) => {
                    retried = false;
                    backoff.reset();
                    self.watching(name);
                    on(Ok(item));
                }
                Err(e) => {
                    on(Err(&e));
                    retried = true;
                    if expired(&e) {
                        // The watcher starts over with a list on its next
                        // poll: nothing to wait for.
                        tracing::info!(watch = name, "the API server no longer has this watch's resource version (410 Expired): listing again at once");
                        self.update(name, |h| h.relists += 1);
                        continue;
                    }
                    let why = with_root_cause(&e);
                    self.update(name, |h| {
                        if h.state != "retrying" {
                            tracing::warn!(watch = name, error = %why, "watching the API server failed; retrying");
                        }
                        h.state = "retrying";
                        h.errors += 1;
                        h.last_error = Some(why);
                    });
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }
}

/// The API server no longer has the watch's resource version. Only the
/// watch event's 410 resets kube's watcher to a fresh list; a 410 on
/// starting a watch keeps the old version, so it is waited on like any
/// other failure (else it would be asked for again at once, for ever).
fn expired(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchError(status) if status.code == 410)
}

/// `e` and its deepest cause: kube's own words stop at "client error
/// (Connect)", before the "Connection refused" an operator needs, and the
/// causes between repeat them.
fn with_root_cause(e: &watcher::Error) -> String {
    let mut root: &dyn std::error::Error = e;
    while let Some(source) = root.source() {
        root = source;
    }
    let (outer, deepest) = (e.to_string(), root.to_string());
    match outer.contains(&deepest) {
        true => outer,
        false => format!("{outer}: {deepest}"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
