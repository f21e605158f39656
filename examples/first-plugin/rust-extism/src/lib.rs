use extism_pdk::*;

/// `greet`: the input is a name, the output a greeting.
/// An empty name is an error: the caller gets it as a `plugin_error`.
#[plugin_fn]
pub fn greet(name: String) -> FnResult<String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::msg("give me a name").into());
    }
    Ok(format!("Hello, {name}!"))
}
