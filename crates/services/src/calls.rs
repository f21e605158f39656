//! The service calls a traced request made: each Redis command and
//! PostgreSQL statement, with its time and outcome, noted where the call
//! is counted (so both ABIs' calls are, whichever made them) and read by
//! the gateway when the request ends, to become the trace's database spans.
//!
//! The log travels with the request's task (a tokio task-local set by the
//! gateway around a traced request), and [`carry`] takes it along into a
//! task a call is spawned on (Proxy-Wasm callouts run on their own). A
//! request that is not traced has no log, and a call costs one task-local
//! lookup.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

tokio::task_local! {
    static CALLS: Arc<CallLog>;
    /// The plugin whose call runs in the task (its span is the call's
    /// parent), when the gateway knows it.
    static CALLER: Arc<str>;
}

/// A traced request's service calls, in the order they ended.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<Vec<ServiceCall>>,
}

/// One call: what OpenTelemetry's database conventions name.
#[derive(Clone, Debug)]
pub struct ServiceCall {
    /// `redis` or `postgresql` (`db.system.name`).
    pub system: &'static str,
    /// The service's name in the configuration.
    pub service: String,
    /// The command (`GET`) or the statement's first keyword (`SELECT`).
    pub operation: String,
    /// A statement's text, its parameters apart (`$1`, ...): no values.
    pub text: Option<String>,
    pub started: Instant,
    pub elapsed: Duration,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The plugin that made it, when known (filled in by [`note`]).
    pub caller: Option<Arc<str>>,
}

impl CallLog {
    pub fn take(&self) -> Vec<ServiceCall> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Runs `request` with `log` collecting its service calls.
pub async fn scope<F: Future>(log: Arc<CallLog>, request: F) -> F::Output {
    CALLS.scope(log, request).await
}

/// `call`, collecting into the current request's log if it has one (for a
/// call that runs on a task of its own), as plugin `caller`'s.
pub fn carry<F: Future>(caller: &str, call: F) -> impl Future<Output = F::Output> + use<F> {
    let log = CALLS.try_with(Arc::clone).ok();
    let caller: Option<Arc<str>> = log.as_ref().map(|_| caller.into());
    async move {
        match (log, caller) {
            (Some(log), Some(caller)) => CALLS.scope(log, CALLER.scope(caller, call)).await,
            _ => call.await,
        }
    }
}

/// Whether the current task's request keeps a log of its service calls.
pub fn recording() -> bool {
    CALLS.try_with(|_| ()).is_ok()
}

/// Runs `call` (made in the current task) as plugin `caller`'s.
pub async fn made_by<F: Future>(caller: Arc<str>, call: F) -> F::Output {
    CALLER.scope(caller, call).await
}

/// Notes a call in the current request's log, if it has one.
pub(crate) fn note(call: impl FnOnce() -> ServiceCall) {
    let _ = CALLS.try_with(|log| {
        let mut call = call();
        call.caller = CALLER.try_with(Arc::clone).ok();
        log.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    });
}

/// The first keyword of a statement, upper case (`SELECT`), for a span's name.
pub(crate) fn operation_of(sql: &str) -> String {
    sql.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

/// A statement's text for a span, at most 1 KiB (cut on a character boundary).
pub(crate) fn text_of(sql: &str) -> String {
    let mut end = sql.len().min(1024);
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    sql[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_are_noted_in_their_request_and_carried_into_spawned_tasks() {
        let log = Arc::new(CallLog::default());
        fn call(operation: &str) -> ServiceCall {
            ServiceCall {
                system: "redis",
                service: "cache".into(),
                operation: operation.into(),
                text: None,
                started: Instant::now(),
                elapsed: Duration::ZERO,
                error: None,
                caller: None,
            }
        }
        note(|| call("OUTSIDE"));
        scope(log.clone(), async {
            note(|| call("GET"));
            tokio::spawn(carry("filter", async { note(|| call("SET")) }))
                .await
                .unwrap();
            tokio::spawn(async { note(|| call("LOST")) }).await.unwrap();
            made_by("function".into(), async { note(|| call("DEL")) }).await;
        })
        .await;
        let noted: Vec<(String, Option<String>)> = log
            .take()
            .into_iter()
            .map(|c| (c.operation, c.caller.map(|c| c.to_string())))
            .collect();
        assert_eq!(
            noted,
            [
                ("GET".into(), None),
                ("SET".into(), Some("filter".into())),
                ("DEL".into(), Some("function".into()))
            ]
        );
        assert_eq!(operation_of("  select * from t where id = $1"), "SELECT");
        assert_eq!(text_of(&"é".repeat(600)).len(), 1024);
    }
}
