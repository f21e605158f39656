//! Secrets in configuration entries as the admin API shows them: replaced
//! by [`REDACTED`] on the way out, and put back from the stored entry when
//! a client writes an entry it read (docs/admin.md, "Secrets").
//!
//! A value is a secret by its field's name (one ending in `password`,
//! `token`, `secret` or `key`: `password`, `api_key`, `clientSecret`,
//! `access-token`), or because the plugin marks the name
//! (`secret_fields`), in plugins' `config`, `env` and `vm_config` and in
//! routes' filter `conf`; besides the fields the schema knows are secret
//! (a registry's password and token, a certificate's key, a service URL's
//! password).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// What a secret is shown as; written back, it keeps the stored value.
pub const REDACTED: &str = "<redacted>";

/// What a service URL's password is shown as (`redis://:***@host`).
const URL_PASSWORD: &str = "***";

const SUFFIXES: [&str; 4] = ["password", "token", "secret", "key"];

/// Whether a field named `name` holds a secret (`marked`: names a plugin
/// says are secret, compared as written).
pub fn is_secret_name(name: &str, marked: &[String]) -> bool {
    if marked.iter().any(|m| m == name) {
        return true;
    }
    SUFFIXES.iter().any(|suffix| {
        let Some(at) = name.len().checked_sub(suffix.len()) else {
            return false;
        };
        let (before, end) = name.split_at(at);
        // The suffix is a word of the name: all of it, after a separator,
        // or a camelCase word (`apiKey`), not the end of another word
        // (`monkey`).
        end.eq_ignore_ascii_case(suffix)
            && (before.is_empty()
                || before.ends_with(['_', '-', '.'])
                || end.starts_with(|c: char| c.is_ascii_uppercase()))
    })
}

/// Replaces every secret in `value`: the values of object fields with
/// secret names, at any depth.
pub fn redact_json(value: &mut Value, marked: &[String]) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                if is_secret_name(name, marked) && !field.is_null() {
                    *field = Value::String(REDACTED.into());
                } else {
                    redact_json(field, marked);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, marked)),
        _ => {}
    }
}

/// `new` with every [`REDACTED`] value (and every service URL password
/// shown as `***`) taken from `stored` at the same place: a client that
/// reads an entry and writes it back changed nothing it could not see.
/// A marker with nothing stored in its place is refused.
pub fn restore<T: Serialize + DeserializeOwned>(new: &T, stored: Option<&T>) -> Result<T, String> {
    let mut value = serde_json::to_value(new).map_err(|e| e.to_string())?;
    let stored = match stored {
        Some(stored) => serde_json::to_value(stored).map_err(|e| e.to_string())?,
        None => Value::Null,
    };
    put_back(&mut value, &stored, "")?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

fn put_back(value: &mut Value, stored: &Value, at: &str) -> Result<(), String> {
    match value {
        Value::String(text) if text == REDACTED => match stored {
            Value::Null => Err(format!(
                "`{at}` is `{REDACTED}`, but no value is stored there to keep: write the secret itself"
            )),
            stored => {
                *value = stored.clone();
                Ok(())
            }
        },
        Value::String(text) => {
            if let Some(kept) = url_password_kept(text, stored.as_str()) {
                *text = kept;
            }
            Ok(())
        }
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                let at = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
                put_back(field, stored.get(name).unwrap_or(&Value::Null), &at)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                put_back(item, stored.get(i).unwrap_or(&Value::Null), &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A URL whose password is `***`, with the stored URL's password instead,
/// when the stored one has the same scheme, user and host.
fn url_password_kept(text: &str, stored: Option<&str>) -> Option<String> {
    let at = text.find("@")?;
    let (credentials, rest) = text.split_at(at);
    let (prefix, password) = credentials.rsplit_once(':')?;
    if password != URL_PASSWORD {
        return None;
    }
    let stored = stored?;
    let stored_at = stored.find('@')?;
    let (stored_credentials, stored_rest) = stored.split_at(stored_at);
    let (stored_prefix, stored_password) = stored_credentials.rsplit_once(':')?;
    (stored_prefix == prefix && stored_rest == rest)
        .then(|| format!("{prefix}:{stored_password}{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_names_are_words_not_endings() {
        for name in [
            "password",
            "api_key",
            "clientSecret",
            "access-token",
            "apiKey",
            "KEY",
            "redis.password",
        ] {
            assert!(is_secret_name(name, &[]), "{name}");
        }
        for name in [
            "monkey",
            "key_header",
            "tokens",
            "passwords_allowed",
            "hockey",
        ] {
            assert!(!is_secret_name(name, &[]), "{name}");
        }
        assert!(is_secret_name("consumers", &["consumers".into()]));
    }

    #[test]
    fn redacted_at_any_depth_and_kept_when_written_back() {
        let stored = json!({"name": "x", "conf": {"consumers": [{"name": "a", "api_key": "s3cret"}],
                            "limit": 5}, "url": "redis://:pw@cache:6379/0"});
        let mut shown = stored.clone();
        redact_json(&mut shown, &[]);
        assert_eq!(shown["conf"]["consumers"][0]["api_key"], REDACTED);
        assert_eq!(shown["conf"]["limit"], 5);
        let mut written = shown.clone();
        written["conf"]["limit"] = json!(6);
        written["url"] = json!("redis://:***@cache:6379/0");
        let kept = restore(&written, Some(&stored)).unwrap();
        assert_eq!(kept["conf"]["consumers"][0]["api_key"], "s3cret");
        assert_eq!(kept["conf"]["limit"], 6);
        assert_eq!(kept["url"], "redis://:pw@cache:6379/0");
        // A marker where nothing is stored is refused; a URL to another
        // host does not get the stored password.
        let err = restore(&shown, None).unwrap_err();
        assert!(err.contains("conf.consumers[0].api_key"), "{err}");
        let moved = json!({"url": "redis://:***@elsewhere:6379/0"});
        let kept = restore(&moved, Some(&stored)).unwrap();
        assert_eq!(kept["url"], "redis://:***@elsewhere:6379/0");
    }
}
