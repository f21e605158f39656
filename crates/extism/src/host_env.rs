//! Every function of `extism:host/env`, the import module of the Extism PDKs.
//!
//! Memory functions work on the instance's [`ExtismMemory`](crate::memory::ExtismMemory);
//! every offset and length from the guest is checked there. Behaviour and
//! messages follow the reference runtime (the `extism` crate 1.30.0 and its
//! kernel): an offset outside Extism memory is ignored by the memory
//! functions, as by the kernel; the host functions that take handles read 0
//! as the null handle (no bytes: an empty key or message), and fail the
//! guest's call on any other handle that is not a live block (a freed one,
//! an interior pointer), as the reference host does.

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
        kernel::alloc(&mut c.as_context_mut(), n, true)
    })?;
    linker.func_wrap(MODULE, "free", |mut c: Ctx, p: u64| {
        kernel::free(&mut c.as_context_mut(), p)
    })?;
    linker.func_wrap(MODULE, "length", |c: Ctx, p: u64| c.data().memory.length(p))?;
    // The kernel's unchecked variant; here it is the same checked lookup.
    linker.func_wrap(MODULE, "length_unsafe", |c: Ctx, p: u64| {
        c.data().memory.length(p)
    })?;
    linker.func_wrap(MODULE, "reset", |mut c: Ctx| {
        kernel::reset(&mut c.as_context_mut())
    })?;
    linker.func_wrap(MODULE, "memory_bytes", |c: Ctx| {
        c.data().memory.memory_bytes()
    })?;
    Ok(())
}

fn add_io_functions(linker: &mut Linker<ExtismState>) -> Result<()> {
    linker.func_wrap(MODULE, "input_set", |mut c: Ctx, p: u64, len: u64| {
        if c.data_mut().memory.mark_input(p, len) {
            kernel::sync_header(&mut c.as_context_mut());
        }
    })?;
    linker.func_wrap(MODULE, "output_set", |mut c: Ctx, p: u64, len: u64| {
        c.data_mut().memory.set_output(p, len)
    })?;
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

/// The bytes the guest passed as `handle` (0: none), left in place; an
/// invalid handle fails the call, with the reference host's message.
fn read_bytes(c: &mut Ctx, handle: u64, what: &str) -> Result<Vec<u8>> {
    match kernel::read_handle(&mut c.as_context_mut(), handle) {
        Some(bytes) => Ok(bytes),
        None => wasmtime::bail!("invalid handle offset for {what}: {handle}"),
    }
}

/// Like [`read_bytes`], and frees the block (the callee owns handles passed
/// to it, as in the reference runtime).
fn take_bytes(c: &mut Ctx, handle: u64, what: &str) -> Result<Vec<u8>> {
    let bytes = read_bytes(c, handle, what)?;
    free(c, handle);
    Ok(bytes)
}

fn free(c: &mut Ctx, handle: u64) {
    kernel::free(&mut c.as_context_mut(), handle);
}

/// A key (of config or vars) must be UTF-8: the reference fails the call
/// with the decoder's message otherwise.
fn key_string(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| wasmtime::Error::from(e.utf8_error()))
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
        |mut c: Ctx, handle: u64| -> Result<u64> {
            let key = key_string(read_bytes(&mut c, handle, "config key")?)?;
            free(&mut c, handle);
            let plugin = c.data().plugin.clone();
            match plugin.config.get(&key) {
                Some(value) => give_bytes(&mut c, value.as_bytes()),
                None => Ok(0),
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "var_get",
        |mut c: Ctx, handle: u64| -> Result<u64> {
            let key = key_string(read_bytes(&mut c, handle, "var key")?)?;
            free(&mut c, handle);
            let value = c.data().plugin.vars.lock().unwrap().get(&key).cloned();
            match value {
                Some(value) => give_bytes(&mut c, &value),
                None => Ok(0),
            }
        },
    )?;
    // In the reference's order: nothing is freed or changed unless the call
    // succeeds, and key and value may be the same block.
    linker.func_wrap(
        MODULE,
        "var_set",
        |mut c: Ctx, key_handle: u64, value_handle: u64| -> Result<()> {
            let max = c.data().plugin.max_var_bytes;
            if max == 0 {
                wasmtime::bail!("Vars are disabled by this host");
            }
            let key = key_string(read_bytes(&mut c, key_handle, "var key")?)?;
            let plugin = c.data().plugin.clone();
            let mut vars = plugin.vars.lock().unwrap();
            if value_handle == 0 {
                vars.remove(&key);
                free(&mut c, key_handle);
                return Ok(());
            }
            let value = read_bytes(&mut c, value_handle, "var value")?;
            let size: usize = var_entry_size(&key, value.len())
                + vars
                    .iter()
                    .map(|(k, v)| var_entry_size(k, v.len()))
                    .sum::<usize>();
            if size > max as usize {
                wasmtime::bail!("Variable store is full");
            }
            free(&mut c, value_handle);
            free(&mut c, key_handle);
            vars.insert(key, value);
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
                // The URL and the allow-list are checked before the body's
                // handle, in the reference's order.
                let plugin = c.data().plugin.clone();
                let url = url::Url::parse(&parsed.url)
                    .map_err(|e| http::HttpError::InvalidUrl(format!("{e:?}")))?;
                if !plugin
                    .allowed_hosts
                    .allows(url.host_str().unwrap_or_default())
                {
                    return Err(http::HttpError::NotAllowed(parsed.url).into());
                }
                let payload = match body {
                    0 => Vec::new(),
                    body => take_bytes(&mut c, body, "http request body")?,
                };
                let remaining = c.data().budget.remaining();
                let send = http::send(
                    parsed,
                    payload,
                    &plugin.allowed_hosts,
                    remaining,
                    plugin.max_http_response_bytes,
                );
                let response = crate::services::waiting(&mut c, send).await;
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

/// As in the reference: a level that is off frees the handle if it is one
/// and succeeds, whatever the handle; otherwise the handle must be 0 (an
/// empty message) or a live block. Bytes that are not UTF-8 are logged
/// lossily (the reference logs an error line in their place).
fn log(c: &mut Ctx, level: tracing::Level, handle: u64) -> Result<()> {
    if tracing::level_filters::LevelFilter::current() < level {
        free(c, handle);
        return Ok(());
    }
    let bytes = take_bytes(c, handle, "log message")?;
    let message = String::from_utf8_lossy(&bytes);
    let message = wasmgate_runtime::guest_log::escape(&message);
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
