//! Regressions the fuzzer found, each replayed on its own: an allocator
//! that re-enters the host without end, and a stream kept paused by
//! endless calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgate_proxy_wasm::{
    FilterConfig, FilterPlugin, Headers, HttpCaller, Runtime, RuntimeConfig,
};
use wasmgate_testkit::fuzz::Rng;

use super::blob::fuzz_blob;
use super::drive::{drive, fuzz_exchange, End};
use super::guest::{guest_wat, CALL_RESPONSE, DATA, REQUEST_HEADERS};
use super::probe::Probe;
use super::reports::script_path;
use super::script::{OpBuilder, Script};
use super::tally::Tally;
use super::upstream::FuzzCaller;
use super::{exclusive_store, DEFAULT_SEED, HANG};

/// Regression: a guest whose allocator calls back into the host, which
/// calls its allocator again, without end. Each level took a fiber stack:
/// with the pooling allocator the guest held all 1000 of the engine's stacks
/// ("maximum concurrent limit of 1000 for fibers reached"), without it it
/// mapped 32,731 stacks until the process had no memory mappings left
/// (ENOMEM, 175 MB resident). The host now refuses the fifth nested
/// allocation; the callback fails cleanly, the instance is replaced and the
/// next request is served. A bounded re-entry (3 levels) still works.
#[tokio::test(flavor = "current_thread")]
async fn an_allocator_that_reenters_the_host_is_stopped() {
    let _store = exclusive_store().await;
    for pooling in [true, false] {
        reentry(pooling).await;
    }
}

async fn reentry(pooling: bool) {
    let mut rng = Rng(DEFAULT_SEED);
    let runtime = Runtime::new(RuntimeConfig {
        pooling,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = FilterConfig {
        name: "reentry".into(),
        vm_id: "reentry".into(),
        http_caller: Some(caller),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, guest_wat().as_bytes(), config)
        .await
        .unwrap();
    let (ptr, len) = blob.kind("plugin-name")[0];
    let get_name = OpBuilder::new("proxy_get_property")
        .arg(ptr)
        .arg(len)
        .out(0)
        .out(1)
        .build();
    for max_depth in [3, 100_000] {
        let mut script = Script::new(vec![get_name]);
        script.alloc_mode = 2;
        script.max_depth = max_depth;
        script.reentrant = get_name;
        let mut exchange = fuzz_exchange(&mut rng);
        exchange
            .properties
            .insert(script_path(REQUEST_HEADERS), script.encode(&blob));
        let mut reports = Vec::new();
        let started = Instant::now();
        let (end, _) =
            tokio::time::timeout(HANG, drive(&plugin, &mut exchange, &mut reports, false))
                .await
                .expect("re-entry hung");
        let deepest = reports.iter().map(|r| r.depth).max().unwrap();
        match (max_depth, end) {
            (3, End::Finished) => {
                assert_eq!(deepest, 3);
                assert!(reports.iter().all(|r| r.status == 0), "{reports:?}");
            }
            (100_000, End::Crashed(callback, message, trap)) => {
                assert_eq!(callback, "proxy_on_request_headers");
                assert!(
                    message.contains(
                        "proxy_get_property: the guest's allocator re-entered the host 4 calls deep"
                    ),
                    "{message}"
                );
                assert_eq!(deepest, 4);
                assert!(started.elapsed() < Duration::from_secs(1));
                let mut tally = Tally::new();
                tally.account(&reports, Some((&callback, &message, trap)));
            }
            (_, End::Crashed(_, message, _)) => panic!("depth {max_depth}: {message}"),
            (_, _) => panic!("depth {max_depth}: ended without the expected outcome"),
        }
        probe.run(&plugin, "reentry", true, &mut rng).await;
    }
    assert_eq!(plugin.status().discarded, 1);
}

/// Regression: a filter that pauses for an http call and answers each
/// response with another call, never resuming. The stream waited forever,
/// holding the request and its instance (found by the fuzzer, seed
/// 0x6b041411); now the pause ends at 10 callback deadlines with
/// `PausedTooLong`, the instance is replaced, and the next request is served.
#[tokio::test(flavor = "current_thread")]
async fn a_stream_kept_paused_by_endless_calls_ends() {
    let _store = exclusive_store().await;
    let mut rng = Rng(DEFAULT_SEED);
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = FilterConfig {
        name: "endless-calls".into(),
        vm_id: "endless-calls".into(),
        http_caller: Some(caller),
        timeout: Some(Duration::from_millis(50)),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, guest_wat().as_bytes(), config)
        .await
        .unwrap();
    let call = OpBuilder::new("proxy_http_call")
        .buf(blob.kind("known-upstream")[0])
        .buf(blob.kind("map")[0])
        .buf((DATA, 0))
        .buf((DATA, 0))
        .arg(1000)
        .out(0)
        .build();
    let mut headers = Script::new(vec![call]);
    headers.action = 1;
    let mut exchange = fuzz_exchange(&mut rng);
    exchange.request_body.clear();
    exchange.request_trailers = Headers::default();
    for (phase, script) in [
        (REQUEST_HEADERS, headers),
        (CALL_RESPONSE, Script::new(vec![call])),
    ] {
        exchange
            .properties
            .insert(script_path(phase), script.encode(&blob));
    }
    let mut reports = Vec::new();
    let started = Instant::now();
    let (end, _) = tokio::time::timeout(
        Duration::from_secs(10),
        drive(&plugin, &mut exchange, &mut reports, false),
    )
    .await
    .expect("the stream stayed paused");
    assert!(matches!(end, End::PausedTooLong));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let calls = reports
        .iter()
        .filter(|r| r.phase == u32::from(CALL_RESPONSE))
        .count();
    assert!(calls > 10, "only {calls} calls were answered");
    assert!(reports.iter().all(|r| r.status == 0), "{reports:?}");
    assert_eq!(plugin.status().discarded, 1);
    probe.run(&plugin, "endless-calls", true, &mut rng).await;
}
