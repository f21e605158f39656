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

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Sizing and policy of one pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most instances alive at once (checked out plus idle).
    pub max_instances: usize,
    /// Fresh instance for every call; nothing is reused.
    pub isolation: bool,
    /// How long a call may wait for a free instance before it is refused.
    pub acquire_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_instances: 64,
            isolation: false,
            acquire_timeout: Duration::from_secs(1),
        }
    }
}

/// Why no instance could be had.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error("all {max} instances are busy and none became free within {waited:?}")]
    Overloaded { max: usize, waited: Duration },
    #[error("instantiation is backing off after {failures} consecutive failures (retry in {retry_after:?}); last error: {last_error}")]
    BackingOff {
        failures: u32,
        retry_after: Duration,
        last_error: String,
    },
    #[error("instantiation failed: {0:#}")]
    Instantiate(anyhow::Error),
}

/// Counters for status pages and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub created: u64,
    pub discarded: u64,
    pub instantiation_failures: u64,
    pub rejected: u64,
    /// Calls that found every instance busy and had to wait.
    pub waits: u64,
    /// Instantiations that failed in a row (0 once one succeeds).
    pub consecutive_failures: u32,
    /// Whether instantiation is in crash-loop backoff now.
    pub backing_off: bool,
    pub idle: usize,
    pub in_use: usize,
}

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
    idle: Mutex<Vec<I>>,
    slots: Arc<Semaphore>,
    backoff: Mutex<Backoff>,
    created: AtomicU64,
    discarded: AtomicU64,
    rejected: AtomicU64,
    waits: AtomicU64,
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

impl<I: Send> InstancePool<I> {
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
        };
        InstancePool {
            inner: Arc::new(inner),
        }
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
        if !self.inner.config.isolation {
            if let Some(instance) = self.inner.idle.lock().unwrap().pop() {
                return Ok(Lease::new(self.inner.clone(), instance, permit));
            }
        }
        self.check_backoff()?;
        match create().await {
            Ok(instance) => {
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
        let drained: Vec<I> = std::mem::take(&mut *self.inner.idle.lock().unwrap());
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
            idle,
            in_use: self.inner.config.max_instances - self.inner.slots.available_permits(),
        }
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
            self.pool.idle.lock().unwrap().push(instance);
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn pool(max: usize, isolation: bool, wait_ms: u64) -> InstancePool<usize> {
        InstancePool::new(PoolConfig {
            max_instances: max,
            isolation,
            acquire_timeout: Duration::from_millis(wait_ms),
        })
    }

    #[tokio::test]
    async fn reuses_released_instances_and_never_shares_one() {
        let pool = pool(2, false, 1000);
        let counter = AtomicUsize::new(0);
        let make = || async { Ok(counter.fetch_add(1, Ordering::SeqCst)) };
        let mut a = pool.acquire(make).await.unwrap();
        let mut b = pool.acquire(make).await.unwrap();
        assert_ne!(*a.instance(), *b.instance());
        a.release();
        let mut c = pool.acquire(make).await.unwrap();
        assert_eq!(*c.instance(), 0, "released instance is reused");
        b.release();
        c.release();
        assert_eq!(pool.stats().created, 2);
    }

    #[tokio::test]
    async fn dropped_lease_discards_the_instance() {
        let pool = pool(1, false, 1000);
        let counter = AtomicUsize::new(0);
        let make = || async { Ok(counter.fetch_add(1, Ordering::SeqCst)) };
        drop(pool.acquire(make).await.unwrap());
        let mut next = pool.acquire(make).await.unwrap();
        assert_eq!(
            *next.instance(),
            1,
            "a crashed instance is never handed out again"
        );
        assert_eq!(pool.stats().discarded, 1);
    }

    #[tokio::test]
    async fn isolation_creates_a_fresh_instance_per_call() {
        let pool = pool(1, true, 1000);
        let counter = AtomicUsize::new(0);
        let make = || async { Ok(counter.fetch_add(1, Ordering::SeqCst)) };
        for expected in 0..3 {
            let mut lease = pool.acquire(make).await.unwrap();
            assert_eq!(*lease.instance(), expected);
            lease.release();
        }
    }

    #[tokio::test]
    async fn full_pool_rejects_after_bounded_wait() {
        let pool = pool(1, false, 20);
        let held = pool.acquire(|| async { Ok(7) }).await.unwrap();
        let started = Instant::now();
        let err = pool.acquire(|| async { Ok(8) }).await.err().unwrap();
        assert!(matches!(err, AcquireError::Overloaded { max: 1, .. }));
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert_eq!(pool.stats().rejected, 1);
        drop(held);
    }

    #[tokio::test]
    async fn waiter_gets_the_instance_released_meanwhile() {
        let pool = Arc::new(pool(1, false, 2000));
        let lease = pool.acquire(|| async { Ok(1) }).await.unwrap();
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut lease = pool.acquire(|| async { Ok(2) }).await.unwrap();
                *lease.instance()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        lease.release();
        assert_eq!(waiter.await.unwrap(), 1);
    }

    #[tokio::test]
    async fn repeated_instantiation_failures_back_off() {
        let pool = pool(4, false, 1000);
        let attempts = AtomicUsize::new(0);
        let failing = || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<usize, _>(anyhow::anyhow!("start function trapped"))
        };
        assert!(matches!(
            pool.acquire(failing).await,
            Err(AcquireError::Instantiate(_))
        ));
        assert!(matches!(
            pool.acquire(failing).await,
            Err(AcquireError::Instantiate(_))
        ));
        // Now in backoff: no further attempt is made.
        match pool.acquire(failing).await {
            Err(AcquireError::BackingOff {
                failures,
                last_error,
                ..
            }) => {
                assert_eq!(failures, 2);
                assert!(last_error.contains("start function trapped"));
            }
            other => panic!("expected backoff, got {:?}", other.map(|_| ())),
        }
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        // After the backoff window a success resets it.
        // The first wait is FIRST plus up to as much again (jitter).
        tokio::time::sleep(Backoff::FIRST * 2 + Duration::from_millis(10)).await;
        let mut lease = pool.acquire(|| async { Ok(5) }).await.unwrap();
        assert_eq!(*lease.instance(), 5);
    }
}
