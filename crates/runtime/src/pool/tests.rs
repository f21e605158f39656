//! The pool's tests: instances reused but never shared, discarded when a
//! lease is dropped, fresh per call in isolation mode; bounded waits, the
//! crash-loop backoff, starts one at a time, and idle instances expiring.

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
