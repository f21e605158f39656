//! What one guest call costs the host, with and without a fiber: the number
//! behind "a guest call that starts without a fiber" in docs/benchmarks.md
//! ("Instructions per request").
//!
//! `call_cost MODE CALLS` makes CALLS calls of a one-instruction export on
//! an engine configured as wasmgate's (epoch interruption, pooling):
//! `async` with `call_async` (a fiber per call, as every filter callback
//! today), `sync` with `call` on a store that never yields, `none` no call
//! (the set-up alone). Count the instructions of each under callgrind and
//! subtract `none`: bench/instructions.py's method, for one call.

use wasmgate_runtime::wasmtime::{Module, Store, UpdateDeadline};
use wasmgate_runtime::{Runtime, RuntimeConfig};

const MODULE: &str = r#"(module (func (export "f") (param i32) (result i32) local.get 0))"#;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "async".into());
    let calls: u32 = args.next().map_or(Ok(100_000), |n| n.parse())?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let module = Module::new(runtime.engine(), MODULE)?;
    let linker = wasmgate_runtime::wasmtime::Linker::new(runtime.engine());
    let mut store = Store::new(runtime.engine(), ());
    store.set_epoch_deadline(u64::MAX / 2);
    let mut sum = 0i64;
    match mode.as_str() {
        "async" => {
            store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
            let tokio = tokio::runtime::Builder::new_current_thread().build()?;
            tokio.block_on(async {
                let instance = linker.instantiate_async(&mut store, &module).await?;
                let f = instance.get_typed_func::<i32, i32>(&mut store, "f")?;
                for i in 0..calls {
                    sum += i64::from(f.call_async(&mut store, i as i32).await?);
                }
                anyhow::Ok(())
            })?;
        }
        "sync" => {
            store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)));
            let instance = linker.instantiate(&mut store, &module)?;
            let f = instance.get_typed_func::<i32, i32>(&mut store, "f")?;
            for i in 0..calls {
                sum += i64::from(f.call(&mut store, i as i32)?);
            }
        }
        "none" => {}
        other => anyhow::bail!("unknown mode {other}: async, sync or none"),
    }
    println!("{mode}: {calls} calls, sum {sum}");
    Ok(())
}
