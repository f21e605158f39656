//! Every host capability a plugin can use: config, vars, HTTP, logging,
//! errors and return codes. Inputs and outputs are documented in plugins/README.md.

use std::collections::BTreeMap;

use extism_pdk::*;
use serde::Deserialize;

#[plugin_fn]
pub fn config(key: String) -> FnResult<String> {
    match config::get(&key)? {
        Some(value) => Ok(value),
        None => Err(WithReturnCode::new(Error::msg(format!("no such config key: {key}")), 1)),
    }
}

/// Input `k=v`: sets var k to v, reads it back and outputs it.
#[plugin_fn]
pub fn var_roundtrip(input: String) -> FnResult<String> {
    let (key, value) = input.split_once('=').ok_or_else(|| Error::msg("expected k=v"))?;
    var::set(key, value)?;
    Ok(var::get::<String>(key)?.unwrap_or_default())
}

#[plugin_fn]
pub fn var_get(key: String) -> FnResult<String> {
    Ok(var::get::<String>(&key)?.unwrap_or_default())
}

#[plugin_fn]
pub fn var_delete(key: String) -> FnResult<()> {
    var::remove(&key)?;
    Ok(())
}

/// Input: a URL. Output: `{"status":S,"body":"...","headers":{...}}`.
#[plugin_fn]
pub fn http_get(url: String) -> FnResult<String> {
    let response = http::request::<()>(&HttpRequest::new(url), None)?;
    let headers: BTreeMap<_, _> = response.headers().iter().collect();
    Ok(serde_json::json!({
        "status": response.status_code(),
        "body": String::from_utf8_lossy(&response.body()),
        "headers": headers,
    })
    .to_string())
}

#[derive(Deserialize)]
struct Post {
    url: String,
    body: String,
}

/// Input: `{"url":...,"body":...}`. Output: the response body.
#[plugin_fn]
pub fn http_post(input: String) -> FnResult<Vec<u8>> {
    let post: Post = serde_json::from_str(&input)?;
    let request = HttpRequest::new(post.url)
        .with_method("POST")
        .with_header("content-type", "text/plain");
    Ok(http::request(&request, Some(post.body))?.body())
}

/// Logs the input at every level; outputs "logged".
#[plugin_fn]
pub fn log(input: String) -> FnResult<String> {
    trace!("trace: {input}");
    debug!("debug: {input}");
    info!("info: {input}");
    warn!("warn: {input}");
    error!("error: {input}");
    Ok("logged".to_string())
}

/// Fails with the input as the error message (error_set, return code 1).
#[plugin_fn]
pub fn fail(message: String) -> FnResult<()> {
    Err(Error::msg(message).into())
}

/// Returns 7 without setting an error.
#[no_mangle]
pub extern "C" fn exit_code() -> i32 {
    7
}
