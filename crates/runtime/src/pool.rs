//! Bounded pools of plugin instances.
//!
//! An instance is checked out as a [`Lease`] by exactly one call at a time and
//! comes back only if the call released it as healthy; a lease dropped any
//! other way (a trap, a timeout, a cancelled request) discards the instance,
//! because its memory may be half-written. In isolation mode nothing comes
//! back: every call gets a fresh instance.
//!
//! Waiting for an instance is bounded: past `acquire_timeout` the caller gets
//! [`AcquireError::Overloaded`] instead of joining an unbounded queue. A plugin
//! whose instances keep failing to start is put in a growing backoff so a
//! broken plugin costs a fast error, not a busy loop of instantiations.
//!
//! Instances start one at a time per pool, and only when waiting would cost
//! more: a call that finds none idle first waits, as long as a start of
//! this plugin takes (a running mean), for an instance to come back, and
//! while another is starting waits for whichever comes first, an instance
//! coming back or that start ending. A pool thus grows only when its
//! instances cannot keep up. A burst of 20 requests on a filter
//! whose start takes half a second of CPU (Higress's WAF compiling its
//! rules) used to start 19 instances at once on the same worker, and every
//! request on it waited seconds; now they queue for the instances in use,
//! which come back in microseconds, and the pool grows one start at a time.
//! (Isolation mode starts one per call, so it is not gated.)
//!
//! A pool grows with concurrency (a filter's instance stays with its request
//! until the request is over) and shrinks back when idle: an instance left
//! unused for `idle_timeout` is dropped, down to the one used last, which
//! stays warm (a heavy filter may take a minute to start).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod vocabulary;

pub use vocabulary::{AcquireError, PoolConfig, PoolStats};

/// Cheap to clone: clones share the same instances.
pub struct InstancePool<I> {
    inner: Arc<PoolInner<I>>,
}

impl<I> Clone for InstancePool<I> {
    fn clone(&self) -> Self {
        InstancePool {
            inner: self.inner.clone(),
        }
    }
}

struct PoolInner<I> {
    config: PoolConfig,
    /// Released instances with when they came back, oldest first.
    idle: Mutex<Vec<(I, Instant)>>,
    slots: Arc<Semaphore>,
    backoff: Mutex<Backoff>,
    created: AtomicU64,
    discarded: AtomicU64,
    rejected: AtomicU64,
    waits: AtomicU64,
    expired: AtomicU64,
    /// One instance starts at a time (see the module's comment).
    starting: Semaphore,
    /// How long a start takes, in ns (a running mean; 0 before the first):
    /// a call that finds no idle instance waits this long for one to come
    /// back before it starts another.
    start_cost: AtomicU64,
    /// An instance came back or a start ended: a waiting call looks again.
    returned: tokio::sync::Notify,
    /// When the pool was made (the time idle instances carry when the pool
    /// never shrinks).
    made: Instant,
}

struct Backoff {
    consecutive_failures: u32,
    until: Option<Instant>,
    last_error: String,
    total_failures: u64,
    delays: wasmgate_base::backoff::Backoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            consecutive_failures: 0,
            until: None,
            last_error: String::new(),
            total_failures: 0,
            delays: wasmgate_base::backoff::Backoff::new(Self::FIRST, Self::MAX),
        }
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(30);

    fn record_failure(&mut self, error: &anyhow::Error) {
        self.consecutive_failures += 1;
        self.total_failures += 1;
        self.last_error = format!("{error:#}");
        // The first failure is retried at once (it may be a transient pool
        // exhaustion); from the second on, wait about 50 ms, 100 ms, ... up
        // to 30 s (each with jitter).
        if self.consecutive_failures >= 2 {
            self.until = Some(Instant::now() + self.delays.next_delay());
        }
    }

    fn record_success(&mut self) {
        self.consecutive_failures = 0;
        self.until = None;
        self.delays.reset();
    }
}

impl<I: Send + 'static> InstancePool<I> {
    pub fn new(config: PoolConfig) -> InstancePool<I> {
        let max = config.max_instances.max(1);
        let inner = PoolInner {
            idle: Mutex::new(Vec::with_capacity(max)),
            slots: Arc::new(Semaphore::new(max)),
            config: PoolConfig {
                max_instances: max,
                ..config
            },
            backoff: Mutex::new(Backoff::default()),
            created: AtomicU64::new(0),
            discarded: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            starting: Semaphore::new(1),
            start_cost: AtomicU64::new(0),
            returned: tokio::sync::Notify::new(),
            made: Instant::now(),
        };
        let pool = InstancePool {
            inner: Arc::new(inner),
        };
        pool.sweep_when_idle();
        pool
    }

    /// With an `idle_timeout`, a task (while the pool exists) drops idle
    /// instances past it, so a pool grown by a burst gives its memory back
    /// when traffic stops, not only when the next call comes.
    fn sweep_when_idle(&self) {
        let (Some(timeout), Ok(runtime)) = (
            self.inner.config.idle_timeout,
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let pool = Arc::downgrade(&self.inner);
        let every = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = pool.upgrade() else { return };
                inner.drop_expired(Instant::now());
            }
        });
    }

    /// Drops the idle instances unused for longer than `idle_timeout` (all
    /// but the one used last); returns how many went.
    pub fn drop_expired(&self) -> usize {
        self.inner.drop_expired(Instant::now())
    }

    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// Checks out an idle instance, or creates one with `create` when none is
    /// idle and the pool is below its size.
    pub async fn acquire<F, Fut>(&self, create: F) -> Result<Lease<I>, AcquireError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<I>>,
    {
        let permit = match self.inner.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.inner.waits.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout(
                    self.inner.config.acquire_timeout,
                    self.inner.slots.clone().acquire_owned(),
                )
                .await
                {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        self.inner.rejected.fetch_add(1, Ordering::Relaxed);
                        return Err(AcquireError::Overloaded {
                            max: self.inner.config.max_instances,
                            waited: self.inner.config.acquire_timeout,
                        });
                    }
                }
            }
        };
        if self.inner.config.isolation {
            return self.start(create, permit).await;
        }
        // The usual case, before anything is set up for waiting.
        if let Some((instance, _)) = self.inner.idle.lock().unwrap().pop() {
            return Ok(Lease::new(self.inner.clone(), instance, permit));
        }
        let began = tokio::time::Instant::now();
        let deadline = began + self.inner.config.acquire_timeout;
        // Worth waiting for an instance to come back rather than starting
        // one for as long as a start takes, if any instance is alive to
        // come back (after a crash took the last, none will).
        let patience = match self.inner.live() {
            0 => Duration::ZERO,
            _ => Duration::from_nanos(self.inner.start_cost.load(Ordering::Relaxed)),
        };
        let patient_until = began + patience;
        let mut waited = false;
        loop {
            // Registered before looking, so a return in between is not missed.
            let returned = self.inner.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some((instance, _)) = self.inner.idle.lock().unwrap().pop() {
                return Ok(Lease::new(self.inner.clone(), instance, permit));
            }
            let now = tokio::time::Instant::now();
            if now >= patient_until {
                if let Ok(_starting) = self.inner.starting.try_acquire() {
                    let started = self.start(create, permit).await;
                    drop(_starting);
                    // A caller waiting on this start may start the next one.
                    self.inner.returned.notify_one();
                    return started;
                }
            }
            if !waited {
                waited = true;
                self.inner.waits.fetch_add(1, Ordering::Relaxed);
            }
            let wake = if now < patient_until {
                patient_until.min(deadline)
            } else {
                deadline
            };
            if tokio::time::timeout_at(wake, returned).await.is_err() && wake == deadline {
                self.inner.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(AcquireError::Overloaded {
                    max: self.inner.config.max_instances,
                    waited: self.inner.config.acquire_timeout,
                });
            }
        }
    }

    /// Starts a new instance for a call that holds `permit`.
    async fn start<F, Fut>(
        &self,
        create: F,
        permit: OwnedSemaphorePermit,
    ) -> Result<Lease<I>, AcquireError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = anyhow::Result<I>>,
    {
        self.check_backoff()?;
        let began = Instant::now();
        match create().await {
            Ok(instance) => {
                // What the next start will likely cost: the mean of this
                // one and the last estimate (a first start sets it).
                let took = began.elapsed().as_nanos().min(u64::MAX as u128) as u64;
                let last = self.inner.start_cost.load(Ordering::Relaxed);
                let estimate = if last == 0 { took } else { (last + took) / 2 };
                self.inner.start_cost.store(estimate, Ordering::Relaxed);
                self.inner.created.fetch_add(1, Ordering::Relaxed);
                self.inner.backoff.lock().unwrap().record_success();
                Ok(Lease::new(self.inner.clone(), instance, permit))
            }
            Err(error) => {
                self.inner.backoff.lock().unwrap().record_failure(&error);
                Err(AcquireError::Instantiate(error))
            }
        }
    }

    fn check_backoff(&self) -> Result<(), AcquireError> {
        let backoff = self.inner.backoff.lock().unwrap();
        if let Some(until) = backoff.until {
            let now = Instant::now();
            if now < until {
                self.inner.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(AcquireError::BackingOff {
                    failures: backoff.consecutive_failures,
                    retry_after: until - now,
                    last_error: backoff.last_error.clone(),
                });
            }
        }
        Ok(())
    }

    /// Drops every idle instance (after a reload, say); leased ones finish first.
    pub fn clear_idle(&self) {
        let drained: Vec<(I, Instant)> = std::mem::take(&mut *self.inner.idle.lock().unwrap());
        self.inner
            .discarded
            .fetch_add(drained.len() as u64, Ordering::Relaxed);
    }

    pub fn stats(&self) -> PoolStats {
        let idle = self.inner.idle.lock().unwrap().len();
        let (consecutive_failures, backing_off) = {
            let backoff = self.inner.backoff.lock().unwrap();
            let backing_off = backoff.until.is_some_and(|until| Instant::now() < until);
            (backoff.consecutive_failures, backing_off)
        };
        PoolStats {
            consecutive_failures,
            backing_off,
            created: self.inner.created.load(Ordering::Relaxed),
            discarded: self.inner.discarded.load(Ordering::Relaxed),
            instantiation_failures: self.inner.backoff.lock().unwrap().total_failures,
            rejected: self.inner.rejected.load(Ordering::Relaxed),
            waits: self.inner.waits.load(Ordering::Relaxed),
            expired: self.inner.expired.load(Ordering::Relaxed),
            idle,
            in_use: self.inner.config.max_instances - self.inner.slots.available_permits(),
        }
    }
}

impl<I> PoolInner<I> {
    /// Instances alive now, idle or leased.
    fn live(&self) -> u64 {
        let gone = self.discarded.load(Ordering::Relaxed) + self.expired.load(Ordering::Relaxed);
        self.created.load(Ordering::Relaxed).saturating_sub(gone)
    }

    fn drop_expired(&self, now: Instant) -> usize {
        let Some(timeout) = self.config.idle_timeout else {
            return 0;
        };
        let expired: Vec<(I, Instant)> = {
            let mut idle = self.idle.lock().unwrap();
            // The last entry is the one used last: it stays.
            let keep_from = idle.len().saturating_sub(1);
            let count = idle[..keep_from]
                .iter()
                .take_while(|(_, since)| now.duration_since(*since) > timeout)
                .count();
            idle.drain(..count).collect()
        };
        // Dropped outside the lock: freeing a large memory takes a while.
        let count = expired.len();
        drop(expired);
        self.expired.fetch_add(count as u64, Ordering::Relaxed);
        count
    }
}

/// One instance, checked out to one call.
/// It owns its slot, so it may outlive the borrow that made it (a response
/// body streamed after the handler returned keeps its filter's instance).
pub struct Lease<I: Send> {
    pool: Arc<PoolInner<I>>,
    instance: Option<I>,
    _permit: OwnedSemaphorePermit,
}

impl<I: Send> Lease<I> {
    fn new(pool: Arc<PoolInner<I>>, instance: I, permit: OwnedSemaphorePermit) -> Self {
        Lease {
            pool,
            instance: Some(instance),
            _permit: permit,
        }
    }

    pub fn instance(&mut self) -> &mut I {
        self.instance
            .as_mut()
            .expect("lease holds an instance until dropped")
    }

    /// Returns a healthy instance to the pool (or drops it in isolation mode).
    pub fn release(mut self) {
        let instance = self.instance.take().expect("released once");
        if self.pool.config.isolation {
            self.pool.discarded.fetch_add(1, Ordering::Relaxed);
        } else {
            // Read the clock only for a pool that shrinks.
            let now = match self.pool.config.idle_timeout {
                Some(_) => Instant::now(),
                None => self.pool.made,
            };
            self.pool.idle.lock().unwrap().push((instance, now));
            self.pool.returned.notify_one();
        }
    }
}

impl<I: Send> Drop for Lease<I> {
    fn drop(&mut self) {
        if self.instance.take().is_some() {
            self.pool.discarded.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
