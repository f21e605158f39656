//! The functions of the ABI that wasmgate links without offering them
//! (foreign functions), and Emscripten's memory-growth notice.

use wasmtime::{FuncType, Linker, Val, ValType};

use super::{Ctx, Result, MODULE};
use crate::abi::Status;
use crate::state::FilterState;

/// Functions of the Proxy-Wasm ABI that wasmgate links but does not offer,
/// with their number of i32 parameters and the status they answer. Every
/// SDK's module imports them (the Rust SDK links all of its ABI), so
/// importing one is normal and says nothing: only a call does, and it is
/// logged once per plugin and function. The statuses are ones the SDKs
/// turn into an error for the plugin (the Rust SDK panics on any status it
/// does not expect, Unimplemented included): no foreign function is
/// registered under any name (NotFound).
pub(super) const UNIMPLEMENTED: &[(&str, usize, Status)] =
    &[("proxy_call_foreign_function", 6, Status::NotFound)];

pub(super) fn add_unimplemented(linker: &mut Linker<FilterState>) -> Result<()> {
    for &(name, i32s, status) in UNIMPLEMENTED {
        let ty = FuncType::new(
            linker.engine(),
            std::iter::repeat_n(ValType::I32, i32s),
            [ValType::I32],
        );
        linker.func_new(MODULE, name, ty, move |c, _, results: &mut [Val]| {
            let plugin = &c.data().plugin.config.name;
            if first_call_of(plugin, name) {
                tracing::warn!(
                    plugin = %plugin,
                    function = name,
                    status = ?status,
                    "the plugin called a Proxy-Wasm host function wasmgate does not implement (logged once per plugin)"
                );
            }
            results[0] = Val::I32(status as i32);
            Ok(())
        })?;
    }
    // Emscripten-built modules (the C++ SDK) tell the host when their memory
    // grows; nothing here caches the memory's size, so there is nothing to do.
    linker.func_wrap(
        MODULE,
        "emscripten_notify_memory_growth",
        |_: Ctx, _: i32| {},
    )?;
    Ok(())
}

/// Whether this process has not yet seen plugin `plugin` call `function`.
fn first_call_of(plugin: &str, function: &'static str) -> bool {
    static SEEN: std::sync::Mutex<Vec<(String, &'static str)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|(p, f)| p == plugin && *f == function) {
        return false;
    }
    seen.push((plugin.to_string(), function));
    true
}
