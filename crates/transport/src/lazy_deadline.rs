//! A deadline a connection sets again for every request, armed once.
//!
//! A fresh `tokio::time::timeout` per request registers a timer in tokio's
//! wheel and takes it out again when the request is answered, under the
//! timer driver's lock both times: about a thousand instructions a proxied
//! request for the upstream's read timeout (`bench/instructions.sh`). A
//! deadline that only moves later as requests come is cheaper kept lazily:
//! one `Sleep` stays armed at an earlier deadline; setting a new deadline is
//! a clock read, and only when the `Sleep` fires is it checked against the
//! current deadline and, if that lies later, re-armed there. The listener's
//! header read timeout and the upstream connections' read timeout use it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub(crate) struct LazyDeadline {
    sleep: Pin<Box<Sleep>>,
    deadline: Instant,
}

impl LazyDeadline {
    pub(crate) fn new(deadline: Instant) -> Self {
        LazyDeadline {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            deadline,
        }
    }

    /// The deadline from now on. A deadline earlier than the armed one is
    /// re-armed at once (the lazy check only catches later ones).
    pub(crate) fn set(&mut self, deadline: Instant) {
        if deadline < self.sleep.deadline() {
            self.sleep.as_mut().reset(deadline);
        }
        self.deadline = deadline;
    }

    /// Whether the deadline has passed; while it has not, `cx` is woken
    /// when it may have.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            if self.sleep.deadline() >= self.deadline {
                return true;
            }
            let deadline = self.deadline;
            self.sleep.as_mut().reset(deadline);
        }
    }

    /// Forgets the waker of the last task that polled it (a connection
    /// parked idle must not keep that task's memory alive until it fires).
    pub(crate) fn forget_waker(&mut self) {
        let _ = self
            .sleep
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
    }
}

/// `work`, unless `deadline` passes first (then `None`).
pub(crate) async fn within<F: Future>(deadline: &mut LazyDeadline, work: F) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        if deadline.poll_expired(cx) {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// `timeout` from now.
pub(crate) fn from_now(timeout: Duration) -> Instant {
    Instant::now() + timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn a_later_deadline_is_kept_and_an_earlier_one_is_armed() {
        let mut deadline = LazyDeadline::new(from_now(100 * MS));
        // Moved later: the first arming fires at 100 ms, the check re-arms
        // at 300 ms.
        let started = Instant::now();
        deadline.set(from_now(300 * MS));
        let slow = within(&mut deadline, tokio::time::sleep(5000 * MS)).await;
        assert!(slow.is_none());
        let waited = started.elapsed();
        assert!(waited >= 300 * MS && waited < 2000 * MS, "{waited:?}");
        // Moved earlier than what is armed: it fires then, not later.
        let started = Instant::now();
        deadline.set(from_now(10_000 * MS));
        deadline.set(from_now(100 * MS));
        let early = within(&mut deadline, tokio::time::sleep(5000 * MS)).await;
        assert!(early.is_none());
        let waited = started.elapsed();
        assert!(waited >= 100 * MS && waited < 2000 * MS, "{waited:?}");
    }

    #[tokio::test]
    async fn work_that_ends_in_time_gives_its_output() {
        let mut deadline = LazyDeadline::new(from_now(2000 * MS));
        let quick = within(&mut deadline, async {
            tokio::time::sleep(10 * MS).await;
            7
        })
        .await;
        assert_eq!(quick, Some(7));
        // The next request's deadline: from now, again.
        let started = Instant::now();
        deadline.set(from_now(100 * MS));
        let late = within(&mut deadline, tokio::time::sleep(5000 * MS)).await;
        assert!(late.is_none());
        assert!(started.elapsed() < 2000 * MS);
    }
}
