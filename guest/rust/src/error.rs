//! The error of every operation: the host's `{"kind", "message", "code"?}`,
//! or one this library found while encoding a request or decoding an answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `kind` values an [`Error`] can have.
///
/// The first six come from the host (docs/services.md); the last three from
/// this library.
pub mod kind {
    /// No service of that name is granted to this plugin, or it is of the
    /// other type (a Redis service used for SQL, or the reverse).
    pub const NOT_GRANTED: &str = "not_granted";
    /// The request is malformed, or a parameter cannot be converted to the
    /// type the statement expects (the message names it, `$2`), or a column's
    /// type has no JSON mapping (cast it in SQL: `col::text`).
    pub const BAD_REQUEST: &str = "bad_request";
    /// No connection could be had: the server is down or refusing,
    /// credentials were refused, or no pooled connection came free in time.
    pub const UNAVAILABLE: &str = "unavailable";
    /// The command or query did not finish within the service's `timeout_ms`.
    pub const TIMEOUT: &str = "timeout";
    /// Redis answered with an error reply (`message` is its text).
    pub const REDIS: &str = "redis";
    /// PostgreSQL refused the statement; `code` is its SQLSTATE.
    pub const QUERY: &str = "query";
    /// (This library.) A request could not be built or sent.
    pub const ENCODE: &str = "encode";
    /// (This library.) An answer, or a value in it, is not what was expected:
    /// `Row::get` asked for a type the value does not convert to, or the
    /// host's answer is not the documented JSON.
    pub const DECODE: &str = "decode";
    /// (This library.) `Row::get` named a column the result does not have, or
    /// an index past the last column.
    pub const NO_SUCH_COLUMN: &str = "no_such_column";
}

/// Why an operation failed.
///
/// `kind` is one of the names in [`kind`]; `code` is PostgreSQL's SQLSTATE
/// for `query` errors (`23505` unique violation, `42P01` undefined table, ...).
/// It implements [`std::error::Error`], so it converts into
/// `extism_pdk::Error` (an `anyhow::Error`) and `?` works inside a
/// `#[plugin_fn]`; `Error::downcast_ref::<wasmgate_pdk::Error>()` gets it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Error {
    /// An error of `kind` with `message` and no code.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Error {
        Error {
            kind: kind.into(),
            message: message.into(),
            code: None,
        }
    }

    pub(crate) fn guest(kind: &str, message: impl Into<String>) -> Error {
        Error::new(kind, message)
    }

    /// Whether `kind` is `kind` (one of the [`kind`] constants).
    pub fn is(&self, kind: &str) -> bool {
        self.kind == kind
    }

    /// The `error` member of an answer. Anything that is not the documented
    /// object still makes an error, of kind `decode`, carrying it.
    pub(crate) fn from_answer(error: Value) -> Error {
        match serde_json::from_value::<Error>(error.clone()) {
            Ok(e) => e,
            Err(_) => Error::guest(
                kind::DECODE,
                format!("the host answered with an error this library cannot read: {error}"),
            ),
        }
    }

    /// The error as the host writes it: `{"kind", "message", "code"?}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("strings serialise")
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(code) = &self.code {
            write!(f, " (SQLSTATE {code})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_host_shape() {
        let e = Error::from_answer(json!({"kind": "not_granted", "message": "no service db"}));
        assert_eq!(e, Error::new("not_granted", "no service db"));
        assert!(e.is(kind::NOT_GRANTED));
        assert_eq!(e.to_string(), "not_granted: no service db");
        assert_eq!(
            e.to_json(),
            json!({"kind": "not_granted", "message": "no service db"})
        );
    }

    #[test]
    fn an_unreadable_error_is_still_an_error() {
        let e = Error::from_answer(json!("boom"));
        assert_eq!(e.kind, kind::DECODE);
        assert!(e.message.contains("\"boom\""));
    }

    #[test]
    fn converts_into_the_pdk_error() {
        fn plugin_like() -> Result<(), extism_pdk::Error> {
            Err(Error::new(kind::TIMEOUT, "too slow"))?;
            Ok(())
        }
        let e = plugin_like().unwrap_err();
        assert_eq!(e.to_string(), "timeout: too slow");
        assert_eq!(e.downcast_ref::<Error>().unwrap().kind, "timeout");
    }
}
