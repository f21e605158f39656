//! `hello`: greets the name given as input with `{"message":"Hello <name>"}`.

use extism_pdk::*;

#[plugin_fn]
pub fn hello(name: String) -> FnResult<String> {
    Ok(serde_json::json!({ "message": format!("Hello {name}") }).to_string())
}
