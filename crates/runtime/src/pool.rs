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

/// Sizing and policy of one pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most instances alive at once (checked out plus idle).
    pub max_instances: usize,
    /// Fresh instance for every call; nothing is reused.
    pub isolation: bool,
    /// How long a call may wait for a free instance before it is refused.
    pub acquire_timeout: Duration,
    /// Idle instances unused this long are dropped (all but the last used);
    /// `None`: kept until a reload.
    pub idle_timeout: Option<Duration>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_instances: 64,
            isolation: false,
            acquire_timeout: Duration::from_secs(1),
            idle_timeout: None,
        }
    }
}

/// Why no instance could be had.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error("no instance became free within {waited:?} (at most {max} run at once, and they start one at a time)")]
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
    /// Idle instances dropped after `idle_timeout`.
    pub expired: u64,
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn pool(max: usize, isolation: bool, wait_ms: u64) -> InstancePool<usize> {
        InstancePool::new(PoolConfig {
            max_instances: max,
            isolation,
            acquire_timeout: Duration::from_millis(wait_ms),
            idle_timeout: None,
        })
    }

    /// A burst finding no idle instance starts one, not one per call: the
    /// others take the instances that come back.
    #[tokio::test]
    async fn a_burst_starts_one_instance_at_a_time() {
        let pool = pool(16, false, 5000);
        let starts = Arc::new(AtomicUsize::new(0));
        let make = |starts: Arc<AtomicUsize>| async move {
            // A slow start (a heavy plugin compiling its rules).
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(starts.fetch_add(1, Ordering::SeqCst))
        };
        let first = pool.acquire(|| make(starts.clone())).await.unwrap();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (pool, starts) = (pool.clone(), starts.clone());
                tokio::spawn(async move {
                    let mut lease = pool.acquire(|| make(starts)).await.unwrap();
                    let instance = *lease.instance();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    lease.release();
                    instance
                })
            })
            .collect();
        // While the second instance starts, the first comes back and serves
        // the waiting calls one after another.
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.release();
        for call in calls {
            call.await.unwrap();
        }
        let stats = pool.stats();
        assert!(
            stats.created <= 3,
            "{stats:?}: the burst started an instance per call"
        );
        assert!(stats.waits >= 1, "{stats:?}");
    }

    /// A call that finds none idle waits about as long as a start takes for
    /// an instance to come back, and starts one only past that.
    #[tokio::test]
    async fn a_call_waits_for_a_return_when_that_is_sooner_than_a_start() {
        let pool = pool(4, false, 5000);
        let make = || async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(7usize)
        };
        let first = pool.acquire(make).await.unwrap();
        let waiting = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire(make).await.map(|l| l.release()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.release();
        waiting.await.unwrap().unwrap();
        assert_eq!(
            pool.stats().created,
            1,
            "the call took the returned instance"
        );
        // Past the patience, a second instance starts.
        let held = pool.acquire(make).await.unwrap();
        let started = Instant::now();
        let mut second = pool.acquire(make).await.unwrap();
        assert_eq!(pool.stats().created, 2);
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "{:?}",
            started.elapsed()
        );
        second.instance();
        drop((held, second));
    }

    /// With no instance alive (a crash took the last), nothing can come back:
    /// a call starts one at once, however long starts take.
    #[tokio::test]
    async fn with_no_instance_alive_a_call_starts_one_at_once() {
        let pool = pool(4, false, 300);
        let make = || async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(1usize)
        };
        drop(pool.acquire(make).await.unwrap()); // dropped, not released: discarded
        let started = Instant::now();
        let lease = pool.acquire(make).await;
        assert!(
            lease.is_ok(),
            "the call waited for a return that could not come"
        );
        assert!(started.elapsed() < Duration::from_millis(900));
        assert_eq!(pool.stats().created, 2);
    }

    #[tokio::test]
    async fn idle_instances_past_the_timeout_go_but_the_last_used_stays() {
        let pool = InstancePool::new(PoolConfig {
            max_instances: 4,
            idle_timeout: Some(Duration::from_millis(200)),
            ..PoolConfig::default()
        });
        let counter = AtomicUsize::new(0);
        let make = || async { Ok(counter.fetch_add(1, Ordering::SeqCst)) };
        let mut leases = Vec::new();
        for _ in 0..3 {
            leases.push(pool.acquire(make).await.unwrap());
        }
        for lease in leases {
            lease.release();
        }
        assert_eq!(pool.stats().idle, 3);
        assert_eq!(pool.drop_expired(), 0, "none has been idle long enough");
        // The sweeper drops two; the one released last stays.
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.stats().idle > 1 {
            assert!(Instant::now() < deadline, "{:?}", pool.stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stats = pool.stats();
        assert_eq!((stats.idle, stats.expired, stats.discarded), (1, 2, 0));
        let mut again = pool.acquire(make).await.unwrap();
        assert_eq!(*again.instance(), 2, "the instance used last is kept");
        again.release();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(pool.stats().idle, 1, "the last one is never dropped");
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
