//! R6 of the reliability suite (issue 4): a long-running property test that
//! drives every Proxy-Wasm host function with hostile pointers, lengths and
//! sequences, in every stream phase, and checks that the host never panics,
//! that every failure is a clean error attributable to the host function
//! that refused the call, that failed instances are replaced, and that a
//! well-formed request through the same plugin still works after each batch.
//!
//! The guest is one hand-written module, generated from [`HOST_FUNCTIONS`]:
//! it imports every host function and interprets a script of calls. The
//! test writes one script per phase into the stream's properties; the guest
//! fetches it with `proxy_get_property` before every call (a hostile call may
//! have overwritten any byte of its memory) and reports each call with
//! `proxy_set_property` under a key that holds a nonce compiled into the
//! guest's code and erased from memory after use, so no hostile call can
//! forge or overwrite a report. Configure and VM-start phases read their
//! scripts from the plugin and VM configuration and report through shared
//! data instead (the exchange does not outlive them).
//!
//! `WASMGATE_FUZZ_ITERS` (streams, default 10000), `WASMGATE_FUZZ_SEED`
//! (default fixed) and `WASMGATE_FUZZ_SECS` (optional time cap) steer it;
//! `reliability/r6_fuzz.sh` runs it for minutes. The summary is printed with
//! `--nocapture`.

mod blob;
mod drive;
mod generator;
mod guest;
mod host_fns;
mod probe;
mod regressions;
mod reports;
mod script;
mod tally;
mod upstream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgate_proxy_wasm::shared::shared;
use wasmgate_proxy_wasm::{FilterConfig, FilterPlugin, HttpCaller, Runtime, RuntimeConfig};
use wasmgate_testkit::fuzz::{env_u64, LogSink, Rng};

use self::blob::fuzz_blob;
use self::drive::{drive, fuzz_exchange, End};
use self::generator::Generator;
use self::guest::{callback_of, guest_wat, CONFIGURE, STARTED, TICK, VM_START};
use self::host_fns::{HOST_FUNCTIONS, STUBBED};
use self::probe::Probe;
use self::reports::{describe_reports, describe_scripts, harvest, harvest_root, script_path};
use self::tally::Tally;
use self::upstream::FuzzCaller;

/// Empties every shared queue, so a long run does not hoard what it enqueued.
/// Ids are handed out in order and never reused; the queues of a VM id
/// whose last plugin is gone leave a gap (at most `shared_queues` ids).
fn drain_queues() {
    use wasmgate_proxy_wasm::abi::Status;
    let (mut id, mut missing) = (1, 0);
    while missing < 64 {
        match shared().dequeue(id) {
            Ok(_) => {
                missing = 0;
                continue;
            }
            Err(Status::NotFound) => missing += 1,
            Err(_) => missing = 0,
        }
        id += 1;
    }
}

const DEFAULT_SEED: u64 = 0x5eed_0006;
/// Streams between two probes.
const BATCH: u64 = 50;
/// One iteration in this many fuzzes a plugin's start-up instead of a stream.
const ROOT_EVERY: u64 = 40;
const MAX_OPS: u32 = 16;
/// A stream or probe that takes longer has hung.
const HANG: Duration = Duration::from_secs(30);
const CALLBACK_DEADLINE: Duration = Duration::from_millis(300);

/// The shared-data store, queues and metrics are one per process, and hostile
/// scripts write to ids they guess, so a test that probes them must not run
/// beside another that runs hostile scripts (the probe's counter was once set
/// to i64::MAX by a concurrent test between its two reads). Held for a
/// whole test; a test that failed does not poison it for the others
/// (tokio's mutex: each test has its own runtime, and the guard is held across
/// awaits.)
async fn exclusive_store() -> tokio::sync::MutexGuard<'static, ()> {
    static STORE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    STORE.lock().await
}

#[tokio::test(flavor = "current_thread")]
async fn every_host_function_survives_hostile_calls() {
    let _store = exclusive_store().await;
    let _ = tracing::subscriber::set_global_default(LogSink);
    let seed = env_u64("WASMGATE_FUZZ_SEED", DEFAULT_SEED);
    let iterations = env_u64("WASMGATE_FUZZ_ITERS", 10_000);
    let time_cap = std::env::var("WASMGATE_FUZZ_SECS")
        .ok()
        .map(|s| Duration::from_secs_f64(s.trim().parse().expect("WASMGATE_FUZZ_SECS")));
    let mut rng = Rng(seed);
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let wat = guest_wat();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    assert_eq!(probe.blob.bytes.len(), blob.bytes.len());
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = |name: String, vm_id: &str| FilterConfig {
        name,
        route: "fuzz-route".into(),
        root_id: "fuzz-root-id".into(),
        vm_id: vm_id.into(),
        http_caller: Some(caller.clone()),
        // Also bounds a pause, at 10 deadlines: 3 s.
        timeout: Some(CALLBACK_DEADLINE),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, wat.as_bytes(), config("fuzz".into(), ""))
        .await
        .expect("the fuzz guest loads");
    // Start-ups report through VM id `fuzz-root`'s shared data, read once
    // the start-up is over, failed or not: a VM id's data goes with its
    // last plugin, so one stays loaded.
    let _fuzz_root = FilterPlugin::new(
        &runtime,
        wat.as_bytes(),
        config("fuzz-root-keeper".into(), "fuzz-root"),
    )
    .await
    .expect("the fuzz guest loads");
    probe.run(&plugin, "", true, &mut rng).await;

    let mut tally = Tally::new();
    let started = Instant::now();
    let mut done = 0;
    while done < iterations && time_cap.is_none_or(|cap| started.elapsed() < cap) {
        done += 1;
        if done % ROOT_EVERY == 0 {
            // Start-up: hostile calls in proxy_on_vm_start and proxy_on_configure.
            let mut gen = Generator {
                rng: &mut rng,
                blob: &blob,
                hostile: 0,
            };
            let configure = gen.script(CONFIGURE, MAX_OPS);
            let vm_start = gen.script(VM_START, MAX_OPS);
            let refused = configure.action == 0 || vm_start.action == 0;
            let mut c = config(format!("fuzz-root-{done}"), "fuzz-root");
            c.plugin_configuration = configure.encode(&blob);
            c.vm_configuration = vm_start.encode(&blob);
            let result = tokio::time::timeout(HANG, FilterPlugin::new(&runtime, wat.as_bytes(), c))
                .await
                .expect("plugin start-up hung");
            let mut reports = Vec::new();
            harvest_root("fuzz-root", VM_START, &mut reports);
            harvest_root("fuzz-root", CONFIGURE, &mut reports);
            tally.root_plugins += 1;
            match result {
                Ok(root_plugin) => {
                    tally.account(&reports, None);
                    probe.run(&root_plugin, "fuzz-root", false, &mut rng).await;
                    tally.probes += 1;
                }
                Err(error) => {
                    let message = format!("{error:#}");
                    let failing = reports
                        .iter()
                        .filter(|r| r.status == STARTED)
                        .max_by_key(|r| r.depth);
                    match failing {
                        Some(r) => {
                            let trap = message.contains("failed (trap)");
                            tally.account(&reports, Some((callback_of(r.phase), &message, trap)));
                        }
                        None => {
                            assert!(
                                refused && message.contains("returned false"),
                                "start-up failed with no host call in flight: {message}"
                            );
                            tally.account(&reports, None);
                            *tally.failures.entry("start-up refused").or_default() += 1;
                        }
                    }
                }
            }
            continue;
        }

        // A stream with a script in most phases. The tick phase always has
        // one: it resumes a paused stream, so ticks cannot spin forever.
        let before = plugin.status();
        let mut exchange = fuzz_exchange(&mut rng);
        let split_body = rng.chance(30);
        let mut gen = Generator {
            rng: &mut rng,
            blob: &blob,
            hostile: 0,
        };
        for phase in 0..=TICK {
            if phase == TICK || gen.rng.chance(80) {
                let script = gen.script(phase, MAX_OPS);
                exchange
                    .properties
                    .insert(script_path(phase), script.encode(&blob));
            }
        }
        let mut reports = Vec::new();
        let driven = tokio::time::timeout(
            HANG,
            drive(&plugin, &mut exchange, &mut reports, split_body),
        )
        .await;
        let Ok((end, _)) = driven else {
            harvest(&mut exchange, &mut reports);
            panic!(
                "stream {done} hung (seed {seed:#x})\n{}calls: {}",
                describe_scripts(&exchange),
                describe_reports(&reports)
            );
        };
        tally.streams += 1;
        let failed = match &end {
            End::Finished => {
                tally.account(&reports, None);
                false
            }
            End::Crashed(callback, message, trap) => {
                tally.account(&reports, Some((callback, message, *trap)));
                true
            }
            End::Stalled => {
                tally.account(&reports, None);
                *tally
                    .failures
                    .entry("stream paused with nothing to resume it")
                    .or_default() += 1;
                true
            }
            End::PausedTooLong => {
                tally.account(&reports, None);
                *tally
                    .failures
                    .entry("stream kept paused past the host's limit")
                    .or_default() += 1;
                true
            }
            End::Deadline => {
                tally.account_interrupted(&reports);
                true
            }
        };
        // A failed stream's instance is dropped, never pooled again; the next
        // stream gets a new one.
        let after = plugin.status();
        assert_eq!(after.in_use, 0);
        assert_eq!(after.discarded, before.discarded + u64::from(failed));
        assert_eq!(after.created, before.created + u64::from(before.idle == 0));
        assert_eq!(after.created - after.discarded, after.idle as u64);

        if done % BATCH == 0 {
            probe.run(&plugin, "", rng.chance(50), &mut rng).await;
            tally.probes += 1;
            drain_queues();
        }
    }
    probe.run(&plugin, "", true, &mut rng).await;
    tally.probes += 1;
    let elapsed = started.elapsed();

    let executions = tally.executions();
    // Host functions proper: the two unknown imports are the host's stubs.
    let exercised = HOST_FUNCTIONS
        .iter()
        .zip(&tally.per_function)
        .filter(|(h, c)| c.calls > 0 && !STUBBED.contains(&h.name))
        .count();
    println!(
        "proxy-wasm host functions: seed {seed:#x}, {} streams, {} start-ups, {} probes, {executions} hostile calls in {:.1} s",
        tally.streams,
        tally.root_plugins,
        tally.probes,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>8} {:>11}",
        "function", "calls", "ok", "status", "failed", "interrupted"
    );
    for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
        println!(
            "{:<38} {:>9} {:>9} {:>9} {:>8} {:>11}",
            h.name, c.calls, c.ok, c.other_status, c.failed, c.interrupted
        );
    }
    println!("calls per phase: {:?}", tally.per_phase);
    println!("deepest re-entry: {}", tally.max_depth);
    println!("clean failures: {:?}", tally.failures);
    println!("plugin log events formatted: {}", LogSink::events());
    println!(
        "R6 proxy-wasm: executions={executions} functions={exercised} stubs={} streams={} seconds={:.1} seed={seed:#x} crashes=0",
        STUBBED.len(),
        tally.streams + tally.root_plugins,
        elapsed.as_secs_f64()
    );
    if done >= 1000 {
        for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
            assert!(c.calls > 0, "{} was never called", h.name);
            if h.returns_status {
                assert!(
                    c.ok + c.other_status > 0,
                    "{} never returned normally",
                    h.name
                );
            } else {
                assert_eq!(c.failed + c.interrupted, c.calls, "{} returned", h.name);
            }
        }
    }
}
