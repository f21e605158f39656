//! Logging (`proxy_log`, `proxy_get_log_level`), the clock
//! (`proxy_get_current_time_nanoseconds`) and the tick timer
//! (`proxy_set_tick_period_milliseconds`).

use std::time::{SystemTime, UNIX_EPOCH};

use wasmtime::Linker;

use super::{Ctx, Result, MODULE, OK};
use crate::state::{read, write, write_u32, FilterState};

/// Whether a guest log line at this Proxy-Wasm level would be written.
fn log_enabled(level: i32) -> bool {
    use tracing::Level;
    match level {
        0 => tracing::enabled!(target: "wasmgate::filter", Level::TRACE),
        1 => tracing::enabled!(target: "wasmgate::filter", Level::DEBUG),
        2 => tracing::enabled!(target: "wasmgate::filter", Level::INFO),
        3 => tracing::enabled!(target: "wasmgate::filter", Level::WARN),
        _ => tracing::enabled!(target: "wasmgate::filter", Level::ERROR),
    }
}

pub(super) fn add_logging_and_time(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_log",
        |mut c: Ctx, level: i32, ptr: u32, len: u32| -> Result<i32> {
            // Filters log on every request whatever the host's level (the
            // Rust SDK never asks it): skip the copy when nobody listens.
            if !log_enabled(level) {
                return Ok(OK);
            }
            let message = read(&mut c, "proxy_log", ptr, len)?;
            let message = String::from_utf8_lossy(&message);
            let message = wasmgate_runtime::guest_log::escape(&message);
            let config = &c.data().plugin.config;
            let (plugin, route) = (&config.name, &config.route);
            match level {
                0 => tracing::trace!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                1 => tracing::debug!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                2 => tracing::info!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                3 => tracing::warn!(target: "wasmgate::filter", %plugin, %route, "{message}"),
                _ => tracing::error!(target: "wasmgate::filter", %plugin, %route, "{message}"),
            }
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_log_level",
        |mut c: Ctx, out: u32| -> Result<i32> {
            write_u32(&mut c, "proxy_get_log_level", out, log_level_code())?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_current_time_nanoseconds",
        |mut c: Ctx, out: u32| -> Result<i32> {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            write(
                &mut c,
                "proxy_get_current_time_nanoseconds",
                out,
                &(now.as_nanos() as u64).to_le_bytes(),
            )?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_set_tick_period_milliseconds",
        |mut c: Ctx, period: u32| -> i32 {
            c.data_mut().tick_period_ms = period;
            OK
        },
    )?;
    Ok(())
}

/// The SDKs' level numbering; 5 (critical only) when logging is off.
fn log_level_code() -> u32 {
    wasmgate_runtime::log_level::current().unwrap_or(5)
}
