//! In-process benchmark of wasmgate's Extism runtime, the counterpart of
//! `reference/extism-ref/src/bin/extism-bench.rs` (same plugin, cases and
//! timing protocol). Run by `bench/inprocess.sh`.
//!
//! `cargo run --release -p wasmgate-extism --example inprocess_bench -- --plugin target/wasm/bench.wasm --reflect-plugin target/wasm/reflect.wasm [--quick] [--case NAME]`

use bench_timing::{payload, report, selected, Protocol, SIZES};
use wasmgate_extism::{
    HostFunction, Manifest, Plugin, PluginOptions, PoolConfig, Runtime, RuntimeConfig,
};
use wasmtime::{Val, ValType};

const IMPL: &str = "wasmgate";

fn reflect() -> HostFunction {
    HostFunction::new(
        "reflect",
        [ValType::I64],
        [ValType::I64],
        |plugin, args, results| {
            let handle = args[0].unwrap_i64() as u64;
            let copy = plugin.block(handle)?.to_vec();
            results[0] = Val::I64(plugin.new_block(&copy)? as i64);
            Ok(())
        },
    )
}

fn load(
    runtime: &Runtime,
    path: &str,
    isolation: bool,
    host_functions: Vec<HostFunction>,
) -> Plugin {
    Plugin::new(
        runtime,
        &Manifest::from_wasm_file(path),
        PluginOptions {
            name: Some("bench".into()),
            pool: PoolConfig {
                max_instances: 1,
                isolation,
                ..PoolConfig::default()
            },
            host_functions,
            ..PluginOptions::default()
        },
    )
    .expect("loading the bench plugin")
}

/// Drives a call to completion on this thread, parking it while the call
/// waits: what an embedder without an async runtime does (the SDK's calls
/// are synchronous). A call that moved to the slow lane wakes this thread
/// when it ends. (Polling in a loop instead would keep this thread busy at
/// normal priority, on a pinned run the very CPU the slow lane needs.)
fn run<T>(future: impl std::future::Future<Output = T>) -> T {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    thread_local! {
        // Made once: a call that ends in its first poll (most do) then
        // costs what polling with a no-op waker costs.
        static WAKER: std::task::Waker =
            std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    }
    WAKER.with(|waker| {
        let mut cx = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut cx) {
                return value;
            }
            std::thread::park();
        }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        let i = args.iter().position(|a| a == name);
        i.and_then(|i| args.get(i + 1))
            .unwrap_or_else(|| panic!("{name} PATH is required"))
            .clone()
    };
    let (path, reflect_path) = (flag("--plugin"), flag("--reflect-plugin"));
    let protocol = Protocol::from_args();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = load(&runtime, &path, false, vec![]);
    let reflector = load(&runtime, &reflect_path, false, vec![reflect()]);
    let call = |function: &str, input: &[u8]| {
        let target = if function == "reflect" {
            &reflector
        } else {
            &plugin
        };
        // The output is borrowed where it lies, as the reference SDK's
        // `call::<&[u8], &[u8]>` returns it.
        let len = run(target.call_with(function, input, <[u8]>::len)).expect("bench call failed");
        std::hint::black_box(len);
    };

    if selected("call_overhead") {
        let input = [7u8; 16];
        let (iters, ns) = protocol.measure(|| call("echo", &input));
        report(IMPL, "call_overhead", 16, iters, ns);
    }
    for case in ["echo", "consume", "reflect"] {
        if !selected(case) {
            continue;
        }
        for size in SIZES {
            let input = payload(size);
            let (iters, ns) = protocol.measure(|| call(case, &input));
            report(IMPL, case, size, iters, ns);
        }
    }
    if selected("fresh_instance") {
        // Isolation mode: every call instantiates from the compiled module,
        // runs `noop`, and drops the instance.
        let fresh = load(&runtime, &path, true, vec![]);
        let (iters, ns) = protocol.measure(|| {
            run(fresh.call("noop", b"")).expect("noop failed");
        });
        report(IMPL, "fresh_instance", 0, iters, ns);
    }
}
