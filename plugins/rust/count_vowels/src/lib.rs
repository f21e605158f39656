//! `count_vowels`: counts the vowels of the input. The vowel set comes from
//! the config key `vowels` (default `aeiouAEIOU`); a running total across
//! calls is kept in the var `total` (a decimal string).

use extism_pdk::*;

#[plugin_fn]
pub fn count_vowels(input: String) -> FnResult<String> {
    let vowels = config::get("vowels")?.unwrap_or_else(|| "aeiouAEIOU".to_string());
    let count = input.chars().filter(|c| vowels.contains(*c)).count() as u64;
    let previous: u64 = var::get::<String>("total")?
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let total = previous + count;
    var::set("total", total.to_string())?;
    Ok(serde_json::json!({ "count": count, "total": total, "vowels": vowels }).to_string())
}
