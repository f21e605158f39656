//! Load from many tasks at once, each call's outcome recorded in order:
//! what the restart tests keep running while a server goes away and comes
//! back (crates/services/tests), and then read.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A call's outcome: `Err` holds the error's kind.
pub type Outcome = Result<(), String>;

pub struct Load {
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `tasks` tasks, each making `call` again and again (2 ms apart) until
    /// [`Load::stop`].
    pub fn start<F, Fut>(tasks: usize, call: F) -> Load
    where
        F: Fn() -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Outcome> + Send,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..tasks)
            .map(|_| {
                let (call, stop, outcomes) = (call.clone(), stop.clone(), outcomes.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = call().await;
                        outcomes.lock().unwrap().push(outcome);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            outcomes,
            tasks,
        }
    }

    /// Waits until `check` holds for the outcomes so far; fails the test
    /// after `within`, showing `what` was awaited and the last outcomes.
    pub async fn until(&self, what: &str, within: Duration, check: impl Fn(&[Outcome]) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            {
                let outcomes = self.outcomes.lock().unwrap();
                if check(&outcomes) {
                    return;
                }
                if Instant::now() > deadline {
                    let last = &outcomes[outcomes.len().saturating_sub(5)..];
                    panic!("{what} did not happen within {within:?}; last outcomes: {last:?}");
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `n` calls more than now have been made.
    pub async fn until_more_calls(&self, n: usize) {
        let from = self.outcomes.lock().unwrap().len();
        self.until(&format!("{n} more calls"), Duration::from_secs(10), |o| {
            o.len() >= from + n
        })
        .await;
    }

    /// Waits until `n` calls more than now have failed.
    pub async fn until_more_failures(&self, n: usize) {
        let failures = |o: &[Outcome]| o.iter().filter(|r| r.is_err()).count();
        let from = failures(&self.outcomes.lock().unwrap());
        self.until(
            &format!("{n} more failures"),
            Duration::from_secs(10),
            |o| failures(o) >= from + n,
        )
        .await;
    }

    /// Waits until the last `n` calls all succeeded.
    pub async fn until_recovered(&self, n: usize, within: Duration) {
        self.until("recovery", within, |o| {
            o.len() >= n && o[o.len() - n..].iter().all(Result::is_ok)
        })
        .await;
    }

    /// Stops the tasks; every outcome, in order.
    pub async fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        Arc::try_unwrap(self.outcomes)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|shared| shared.lock().unwrap().clone())
    }
}
