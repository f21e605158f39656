//! Every function of `extism:host/env`, the import module of the Extism PDKs.
//!
//! Memory functions work on the instance's [`ExtismMemory`](crate::memory::ExtismMemory);
//! every offset and length from the guest is checked there, so a bad pointer
//! ends the guest's own call with an error naming the function, the offset and
//! the memory size. Behaviour and messages follow the reference runtime.

use wasmtime::{Caller, Linker};

use crate::http::{self, PluginRequest};
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
        c.data_mut().memory.alloc(n)
    })?;
    linker.func_wrap(MODULE, "free", |mut c: Ctx, p: u64| {
        c.data_mut().memory.free(p)
    })?;
    linker.func_wrap(MODULE, "length", |c: Ctx, p: u64| c.data().memory.length(p))?;
    // The kernel's unchecked variant; here it is the same checked lookup.
    linker.func_wrap(MODULE, "length_unsafe", |c: Ctx, p: u64| {
        c.data().memory.length(p)
    })?;
    linker.func_wrap(MODULE, "load_u8", |c: Ctx, p: u64| -> Result<u32> {
        Ok(c.data().memory.load_u8(p)?.into())
    })?;
    linker.func_wrap(MODULE, "load_u64", |c: Ctx, p: u64| -> Result<u64> {
        Ok(c.data().memory.load_u64(p)?)
    })?;
    linker.func_wrap(
        MODULE,
        "store_u8",
        |mut c: Ctx, p: u64, v: u32| -> Result<()> {
            Ok(c.data_mut().memory.store_u8(p, v as u8)?)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "store_u64",
        |mut c: Ctx, p: u64, v: u64| -> Result<()> { Ok(c.data_mut().memory.store_u64(p, v)?) },
    )?;
    linker.func_wrap(MODULE, "reset", |mut c: Ctx| c.data_mut().memory.reset())?;
    linker.func_wrap(MODULE, "memory_bytes", |c: Ctx| c.data().memory.size())?;
    Ok(())
}

fn add_io_functions(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(MODULE, "input_length", |c: Ctx| {
        c.data().memory.input_length()
    })?;
    linker.func_wrap(MODULE, "input_offset", |c: Ctx| {
        c.data().memory.input_offset()
    })?;
    linker.func_wrap(MODULE, "input_load_u8", |c: Ctx, at: u64| -> Result<u32> {
        Ok(c.data().memory.input_load_u8(at)?.into())
    })?;
    linker.func_wrap(MODULE, "input_load_u64", |c: Ctx, at: u64| -> Result<u64> {
        Ok(c.data().memory.input_load_u64(at)?)
    })?;
    linker.func_wrap(
        MODULE,
        "input_set",
        |mut c: Ctx, p: u64, len: u64| -> Result<()> {
            Ok(c.data_mut().memory.mark_input(p, len)?)
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

/// Reads the string in the block at `handle`, frees the block (the callee owns
/// handles passed to it, as in the reference runtime) and returns the string.
fn take_string(state: &mut ExtismState, handle: u64, what: &str) -> Result<String> {
    let Some(bytes) = state.memory.block(handle) else {
        wasmtime::bail!("invalid handle offset for {what}: {handle}");
    };
    let text = String::from_utf8_lossy(bytes).into_owned();
    state.memory.free(handle);
    Ok(text)
}

/// Copies `bytes` into a new block for the guest; fails the call if memory is exhausted.
fn give_bytes(state: &mut ExtismState, bytes: &[u8]) -> Result<u64> {
    match state.memory.alloc_bytes(bytes) {
        0 if !bytes.is_empty() => {
            wasmtime::bail!("{} unable to allocate memory", state.plugin.name)
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
            let state = c.data_mut();
            let key = take_string(state, key, "config key")?;
            let plugin = state.plugin.clone();
            match plugin.config.get(&key) {
                Some(value) => give_bytes(state, value.as_bytes()),
                None => Ok(0),
            }
        },
    )?;
    linker.func_wrap(MODULE, "var_get", |mut c: Ctx, key: u64| -> Result<u64> {
        let state = c.data_mut();
        let key = take_string(state, key, "var key")?;
        let value = state.plugin.vars.lock().unwrap().get(&key).cloned();
        match value {
            Some(value) => give_bytes(state, &value),
            None => Ok(0),
        }
    })?;
    linker.func_wrap(
        MODULE,
        "var_set",
        |mut c: Ctx, key: u64, value: u64| -> Result<()> {
            let state = c.data_mut();
            let max = state.plugin.max_var_bytes;
            if max == 0 {
                wasmtime::bail!("Vars are disabled by this host");
            }
            let key = take_string(state, key, "var key")?;
            let plugin = state.plugin.clone();
            let mut vars = plugin.vars.lock().unwrap();
            if value == 0 {
                vars.remove(&key);
                return Ok(());
            }
            let Some(bytes) = state.memory.block(value) else {
                wasmtime::bail!("invalid handle offset for var value: {value}");
            };
            let size: usize = var_entry_size(&key, bytes.len())
                + vars
                    .iter()
                    .map(|(k, v)| var_entry_size(k, v.len()))
                    .sum::<usize>();
            if size > max as usize {
                wasmtime::bail!("Variable store is full");
            }
            vars.insert(key, bytes.to_vec());
            drop(vars);
            state.memory.free(value);
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
                let Some(json) = state.memory.block(request) else {
                    wasmtime::bail!("invalid handle offset for http request: {request}");
                };
                let parsed: PluginRequest = serde_json::from_slice(json)
                    .map_err(|e| wasmtime::format_err!("invalid http request JSON: {e}"))?;
                state.memory.free(request);
                let payload = if body == 0 {
                    Vec::new()
                } else {
                    let Some(bytes) = state.memory.block(body) else {
                        wasmtime::bail!("invalid handle offset for http request body: {body}");
                    };
                    let bytes = bytes.to_vec();
                    state.memory.free(body);
                    bytes
                };
                let plugin = state.plugin.clone();
                let remaining = state.budget.remaining();
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
                give_bytes(state, &response.body)
            })
        },
    )?;
    linker.func_wrap(MODULE, "http_status_code", |c: Ctx| {
        i32::from(c.data().http_status)
    })?;
    linker.func_wrap(MODULE, "http_headers", |mut c: Ctx| -> Result<u64> {
        let state = c.data_mut();
        match &state.http_headers {
            Some(headers) => {
                let json = serde_json::to_vec(headers)?;
                give_bytes(state, &json)
            }
            None => Ok(0),
        }
    })?;
    Ok(())
}

fn log(c: &mut Ctx, level: tracing::Level, handle: u64) -> Result<()> {
    let state = c.data_mut();
    if tracing::level_filters::LevelFilter::current() < level {
        state.memory.free(handle);
        return Ok(());
    }
    let message = take_string(state, handle, "log message")?;
    let plugin = &state.plugin.name;
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

/// The PDKs' level numbering: 0 trace .. 4 error; `i32::MAX` when logging is off.
fn log_level_code() -> i32 {
    use tracing::level_filters::LevelFilter;
    match LevelFilter::current() {
        LevelFilter::TRACE => 0,
        LevelFilter::DEBUG => 1,
        LevelFilter::INFO => 2,
        LevelFilter::WARN => 3,
        LevelFilter::ERROR => 4,
        _ => i32::MAX,
    }
}
