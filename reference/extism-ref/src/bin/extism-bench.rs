//! In-process benchmark of the official extism crate, the counterpart of
//! wasmgate's `crates/extism/examples/inprocess_bench.rs`.
//!
//! `extism-bench --plugin target/wasm/bench.wasm --reflect-plugin target/wasm/reflect.wasm [--quick] [--case NAME]`

use bench_timing::{payload, report, selected, Protocol, SIZES};
use extism::{CompiledPlugin, Manifest, Plugin, PluginBuilder, Wasm, PTR};

const IMPL: &str = "extism-1.30.0";

fn builder(path: &str) -> PluginBuilder<'static> {
    PluginBuilder::new(Manifest::new([Wasm::file(path)]))
}

fn reflect_builder(path: &str) -> PluginBuilder<'static> {
    builder(path).with_function_in_namespace(
        "extism:host/user",
        "reflect",
        [PTR],
        [PTR],
        extism::UserData::new(()),
        |plugin, inputs, outputs, _| {
            let input: Vec<u8> = plugin.memory_get_val(&inputs[0])?;
            plugin.memory_set_val(&mut outputs[0], input)?;
            Ok(())
        },
    )
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
    let mut plugin = builder(&path).build().expect("loading the bench plugin");
    let mut reflector = reflect_builder(&reflect_path)
        .build()
        .expect("loading the reflect plugin");

    if selected("call_overhead") {
        let input = [7u8; 16];
        let (iters, ns) = protocol.measure(|| {
            plugin
                .call::<&[u8], &[u8]>("echo", &input)
                .expect("echo failed");
        });
        report(IMPL, "call_overhead", 16, iters, ns);
    }
    for case in ["echo", "consume", "reflect"] {
        if !selected(case) {
            continue;
        }
        for size in SIZES {
            let input = payload(size);
            let target = if case == "reflect" {
                &mut reflector
            } else {
                &mut plugin
            };
            let (iters, ns) = protocol.measure(|| {
                target
                    .call::<&[u8], &[u8]>(case, &input)
                    .expect("bench call failed");
            });
            report(IMPL, case, size, iters, ns);
        }
    }
    if selected("fresh_instance") {
        let compiled = CompiledPlugin::new(builder(&path)).expect("compiling");
        let (iters, ns) = protocol.measure(|| {
            let mut fresh = Plugin::new_from_compiled(&compiled).expect("instantiating");
            fresh
                .call::<&[u8], &[u8]>("noop", b"")
                .expect("noop failed");
        });
        report(IMPL, "fresh_instance", 0, iters, ns);
    }
}
