//! Long guest calls under load (docs/architecture.md, "The slow lane"): a
//! legitimate call that runs for milliseconds keeps making progress while
//! small requests saturate the server's only CPU, and so ends well before
//! its deadline. (Its time is measured in R3b of the reliability suite; here
//! only that it completes: the deadline is ten times what it needs.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::{client, plugin, post, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_completes_on_one_busy_cpu() {
    // One CPU: one worker and one slow-lane thread share it.
    let server = Server::start_on_cpus(
        "0",
        &[
            plugin("bench").to_str().unwrap(),
            "echo",
            "--timeout-ms",
            "500",
        ],
    );
    let c = client();
    let big: Vec<u8> = (0..6_553_600u32).map(|i| (i % 251) as u8).collect();
    // Alone: it completes (this also warms the instance).
    let reply = post(&c, &server.url("/echo"), big.clone()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // 32 connections keep the CPU busy with small requests.
    let stop = Arc::new(AtomicBool::new(false));
    let small_ok = Arc::new(AtomicU64::new(0));
    let small_failed = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..32)
        .map(|_| {
            let (c, url) = (c.clone(), server.url("/noop"));
            let (stop, ok, failed) = (stop.clone(), small_ok.clone(), small_failed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match post(&c, &url, "").await.status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    // The load is running once small requests are being answered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while small_ok.load(Ordering::Relaxed) < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "the load does not run"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = small_ok.load(Ordering::Relaxed);
    for round in 0..3 {
        let reply = post(&c, &server.url("/echo"), big.clone()).await;
        assert_eq!(
            reply.status,
            200,
            "round {round}: a long call under load did not complete within its 500 ms deadline: {}",
            reply.text()
        );
        assert!(reply.body == big, "round {round}: wrong echo");
    }
    let during = small_ok.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    assert!(
        during > 100,
        "the load did not run: {during} small requests"
    );
    assert_eq!(small_failed.load(Ordering::Relaxed), 0);
}
