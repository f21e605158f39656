//! Every function of `extism:host/env`, the import module of the Extism PDKs.
//!
//! Memory functions work on the instance's [`ExtismMemory`](crate::memory::ExtismMemory);
//! every offset and length from the guest is checked there, so a bad pointer
//! ends the guest's own call with an error naming the function, the offset and
//! the memory size. Behaviour and messages follow the reference runtime.

use wasmtime::{AsContextMut, Caller, Linker};

use crate::http::{self, PluginRequest};
use crate::kernel;
use crate::state::ExtismState;

pub const MODULE: &str = "extism:host/env";

type Ctx<'a> = Caller<'a, ExtismState>;
type Result<T> = wasmtime::Result<T>;

/// Adds all of `extism:host/env` to `linker`.
pub fn add_to_linker(linker: &mut Linker<ExtismState>) -> Result<()> {
    add_memory_functions(linker)?;
    add_io_functions(linker)?;
    add_config_and_vars(linker)?;
    add_http(linker)?;
    add_logging(linker)?;
    Ok(())
}

/// The names this module provides, for a clear error when a plugin imports others.
pub const FUNCTIONS: &[&str] = &[
    "alloc",
    "free",
    "length",
    "length_unsafe",
    "load_u8",
    "load_u64",
    "store_u8",
    "store_u64",
    "input_length",
    "input_offset",
    "input_load_u8",
    "input_load_u64",
    "input_set",
    "output_set",
    "output_length",
    "output_offset",
    "error_set",
    "error_get",
    "reset",
    "memory_bytes",
    "config_get",
    "var_get",
    "var_set",
    "http_request",
    "http_status_code",
    "http_headers",
    "log_trace",
    "log_debug",
    "log_info",
    "log_warn",
    "log_error",
    "get_log_level",
];

fn add_memory_functions(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(MODULE, "alloc", |mut c: Ctx, n: u64| {
        kernel::alloc(&mut c.as_context_mut(), n)
    })?;
    linker.func_wrap(MODULE, "free", |mut c: Ctx, p: u64| {
        c.data_mut().memory.free(p);
        kernel::sync_header(&mut c.as_context_mut());
    })?;
    linker.func_wrap(MODULE, "length", |c: Ctx, p: u64| c.data().memory.length(p))?;
    // The kernel's unchecked variant; here it is the same checked lookup.
    linker.func_wrap(MODULE, "length_unsafe", |c: Ctx, p: u64| {
        c.data().memory.length(p)
    })?;
    linker.func_wrap(MODULE, "reset", |mut c: Ctx| {
        c.data_mut().memory.reset();
        kernel::sync_header(&mut c.as_context_mut());
    })?;
    linker.func_wrap(MODULE, "memory_bytes", |c: Ctx| c.data().memory.size())?;
    Ok(())
}

fn add_io_functions(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "input_set",
        |mut c: Ctx, p: u64, len: u64| -> Result<()> {
            c.data_mut().memory.mark_input(p, len)?;
            kernel::sync_header(&mut c.as_context_mut());
            Ok(())
        },
    )?;
    linker.func_wrap(
        MODULE,
        "output_set",
        |mut c: Ctx, p: u64, len: u64| -> Result<()> {
            Ok(c.data_mut().memory.set_output(p, len)?)
        },
    )?;
    linker.func_wrap(MODULE, "output_length", |c: Ctx| {
        c.data().memory.output_length()
    })?;
    linker.func_wrap(MODULE, "output_offset", |c: Ctx| {
        c.data().memory.output_offset()
    })?;
    linker.func_wrap(MODULE, "error_set", |mut c: Ctx, p: u64| {
        c.data_mut().memory.set_error(p)
    })?;
    linker.func_wrap(MODULE, "error_get", |c: Ctx| c.data().memory.error_offset())?;
    Ok(())
}

/// Reads the block at `handle` and frees it (the callee owns handles passed
/// to it, as in the reference runtime).
fn take_bytes(c: &mut Ctx, handle: u64, what: &str) -> Result<Vec<u8>> {
    match kernel::take_block(&mut c.as_context_mut(), handle) {
        Some(bytes) => Ok(bytes),
        None => wasmtime::bail!("invalid handle offset for {what}: {handle}"),
    }
}

/// Like [`take_bytes`], as text.
fn take_string(c: &mut Ctx, handle: u64, what: &str) -> Result<String> {
    let bytes = take_bytes(c, handle, what)?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Copies `bytes` into a new block for the guest; fails the call if memory is exhausted.
fn give_bytes(c: &mut Ctx, bytes: &[u8]) -> Result<u64> {
    match kernel::alloc_bytes(&mut c.as_context_mut(), bytes) {
        0 if !bytes.is_empty() => {
            wasmtime::bail!("{} unable to allocate memory", c.data().plugin.name)
        }
        handle => Ok(handle),
    }
}

/// Size accounting of the reference runtime: per entry the key, the value and
/// the two container headers.
fn var_entry_size(key: &str, value_len: usize) -> usize {
    std::mem::size_of::<String>() + std::mem::size_of::<Vec<u8>>() + key.len() + value_len
}

fn add_config_and_vars(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "config_get",
        |mut c: Ctx, key: u64| -> Result<u64> {
            let key = take_string(&mut c, key, "config key")?;
            let plugin = c.data().plugin.clone();
            match plugin.config.get(&key) {
                Some(value) => give_bytes(&mut c, value.as_bytes()),
                None => Ok(0),
            }
        },
    )?;
    linker.func_wrap(MODULE, "var_get", |mut c: Ctx, key: u64| -> Result<u64> {
        let key = take_string(&mut c, key, "var key")?;
        let value = c.data().plugin.vars.lock().unwrap().get(&key).cloned();
        match value {
            Some(value) => give_bytes(&mut c, &value),
            None => Ok(0),
        }
    })?;
    linker.func_wrap(
        MODULE,
        "var_set",
        |mut c: Ctx, key: u64, value: u64| -> Result<()> {
            let max = c.data().plugin.max_var_bytes;
            if max == 0 {
                wasmtime::bail!("Vars are disabled by this host");
            }
            let key = take_string(&mut c, key, "var key")?;
            let plugin = c.data().plugin.clone();
            let mut vars = plugin.vars.lock().unwrap();
            if value == 0 {
                vars.remove(&key);
                return Ok(());
            }
            let bytes = take_bytes(&mut c, value, "var value")?;
            let size: usize = var_entry_size(&key, bytes.len())
                + vars
                    .iter()
                    .map(|(k, v)| var_entry_size(k, v.len()))
                    .sum::<usize>();
            if size > max as usize {
                wasmtime::bail!("Variable store is full");
            }
            vars.insert(key, bytes);
            Ok(())
        },
    )?;
    Ok(())
}

fn add_http(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap_async(
        MODULE,
        "http_request",
        |mut c: Ctx, (request, body): (u64, u64)| {
            Box::new(async move {
                let state = c.data_mut();
                state.http_status = 0;
                state.http_headers = None;
                let json = take_bytes(&mut c, request, "http request")?;
                let parsed: PluginRequest = serde_json::from_slice(&json)
                    .map_err(|e| wasmtime::format_err!("invalid http request JSON: {e}"))?;
                let payload = match body {
                    0 => Vec::new(),
                    body => take_bytes(&mut c, body, "http request body")?,
                };
                let plugin = c.data().plugin.clone();
                let remaining = c.data().budget.remaining();
                let response = http::send(
                    parsed,
                    payload,
                    &plugin.allowed_hosts,
                    remaining,
                    plugin.max_http_response_bytes,
                )
                .await;
                let state = c.data_mut();
                let response = match response {
                    Ok(r) => r,
                    Err(http::HttpError::Timeout) if remaining.is_some() => {
                        state.budget.mark_timed_out();
                        wasmtime::bail!("timeout");
                    }
                    Err(e) => return Err(e.into()),
                };
                state.http_status = response.status;
                state.http_headers = Some(response.headers);
                give_bytes(&mut c, &response.body)
            })
        },
    )?;
    linker.func_wrap(MODULE, "http_status_code", |c: Ctx| {
        i32::from(c.data().http_status)
    })?;
    linker.func_wrap(MODULE, "http_headers", |mut c: Ctx| -> Result<u64> {
        match &c.data().http_headers {
            Some(headers) => {
                let json = serde_json::to_vec(headers)?;
                give_bytes(&mut c, &json)
            }
            None => Ok(0),
        }
    })?;
    Ok(())
}

fn log(c: &mut Ctx, level: tracing::Level, handle: u64) -> Result<()> {
    if tracing::level_filters::LevelFilter::current() < level {
        c.data_mut().memory.free(handle);
        kernel::sync_header(&mut c.as_context_mut());
        return Ok(());
    }
    let message = take_string(c, handle, "log message")?;
    let plugin = &c.data().plugin.name;
    match level {
        tracing::Level::ERROR => {
            tracing::error!(target: "wasmgate::plugin", plugin = %plugin, "{message}")
        }
        tracing::Level::WARN => {
            tracing::warn!(target: "wasmgate::plugin", plugin = %plugin, "{message}")
        }
        tracing::Level::INFO => {
            tracing::info!(target: "wasmgate::plugin", plugin = %plugin, "{message}")
        }
        tracing::Level::DEBUG => {
            tracing::debug!(target: "wasmgate::plugin", plugin = %plugin, "{message}")
        }
        tracing::Level::TRACE => {
            tracing::trace!(target: "wasmgate::plugin", plugin = %plugin, "{message}")
        }
    }
    Ok(())
}

fn add_logging(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(MODULE, "log_trace", |mut c: Ctx, p: u64| {
        log(&mut c, tracing::Level::TRACE, p)
    })?;
    linker.func_wrap(MODULE, "log_debug", |mut c: Ctx, p: u64| {
        log(&mut c, tracing::Level::DEBUG, p)
    })?;
    linker.func_wrap(MODULE, "log_info", |mut c: Ctx, p: u64| {
        log(&mut c, tracing::Level::INFO, p)
    })?;
    linker.func_wrap(MODULE, "log_warn", |mut c: Ctx, p: u64| {
        log(&mut c, tracing::Level::WARN, p)
    })?;
    linker.func_wrap(MODULE, "log_error", |mut c: Ctx, p: u64| {
        log(&mut c, tracing::Level::ERROR, p)
    })?;
    linker.func_wrap(MODULE, "get_log_level", |_: Ctx| log_level_code())?;
    Ok(())
}

/// The PDKs' level numbering; `i32::MAX` when logging is off.
fn log_level_code() -> i32 {
    wasmgate_runtime::log_level::current().map_or(i32::MAX, |level| level as i32)
}
