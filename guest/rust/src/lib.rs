//! `wasmgate-pdk`: PostgreSQL and Redis for wasmgate's Extism plugins written
//! in Rust, on top of `extism-pdk` 1.4.1.
//!
//! A wasmgate plugin never opens a database connection itself: the host owns
//! pooled connections to the services the operator configured and granted to
//! the plugin (by name), and offers them through the Extism import module
//! `wasmgate:host/services` (functions `redis`, `pg_query`, `pg_execute`, each
//! taking and returning a handle to JSON; docs/services.md is the contract).
//! This crate wraps that JSON in types:
//!
//! - [`pg`]: parameterised queries ([`pg::query`] gives [`pg::Rows`],
//!   [`pg::execute`] the number of rows affected). Parameters are Rust values
//!   ([`pg::ToParam`]); values are never spliced into SQL.
//! - [`redis`]: any command ([`redis::command`]) and a few conveniences
//!   ([`redis::get`], [`redis::set`], [`redis::incr`], [`redis::expire`]);
//!   replies are [`redis::Value`].
//! - [`Error`]: what failed, as the host reports it (`kind`, `message`,
//!   SQLSTATE `code`). It converts into `extism_pdk::Error`, so `?` works
//!   inside `#[plugin_fn]`.
//! - [`raw`]: the three imports with JSON bytes in and out, for requests the
//!   typed API does not build.
//!
//! ```ignore
//! use extism_pdk::*;
//! use wasmgate_pdk::pg;
//!
//! #[plugin_fn]
//! pub fn list_orders(customer: String) -> FnResult<String> {
//!     let rows = pg::query("orders", "select id, total from orders where customer = $1", &[&customer])?;
//!     Ok(rows.to_json().to_string())
//! }
//! ```
//!
//! Built for `wasm32` the calls go to the host. Built natively (unit tests of
//! a plugin's own logic) they go to a handler installed with
//! [`testing::set_host`], or fail with `unavailable` when there is none.

mod bytes;
mod error;
pub mod pg;
pub mod raw;
pub mod redis;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use bytes::Bytes;
pub use error::{kind, Error};

use serde_json::Value;

/// Sends a typed request and turns the answer into a value or an [`Error`]
/// (an answer with `error`, or one that is not JSON).
pub(crate) fn call(function: raw::Function, request: &Value) -> Result<Value, Error> {
    let request = serde_json::to_vec(request).map_err(|e| {
        Error::guest(
            kind::ENCODE,
            format!("cannot encode the {} request: {e}", function.name()),
        )
    })?;
    let answer = raw::call(function, &request)?;
    parse_answer(function, &answer)
}

/// The answer bytes as JSON; `{"error": {...}}` becomes `Err`.
pub(crate) fn parse_answer(function: raw::Function, answer: &[u8]) -> Result<Value, Error> {
    let mut answer: Value = serde_json::from_slice(answer).map_err(|e| {
        Error::guest(
            kind::DECODE,
            format!("the host's {} answer is not JSON: {e}", function.name()),
        )
    })?;
    if let Some(error) = answer.get_mut("error") {
        return Err(Error::from_answer(error.take()));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_answer_is_an_error() {
        let e = parse_answer(
            raw::Function::PgQuery,
            br#"{"error":{"kind":"query","message":"relation \"nope\" does not exist","code":"42P01"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.kind, "query");
        assert_eq!(e.code.as_deref(), Some("42P01"));
        assert_eq!(
            e.to_string(),
            "query: relation \"nope\" does not exist (SQLSTATE 42P01)"
        );
    }

    #[test]
    fn an_answer_that_is_not_json_is_a_decode_error() {
        let e = parse_answer(raw::Function::Redis, b"nope").unwrap_err();
        assert_eq!(e.kind, kind::DECODE);
        assert!(e.message.contains("redis answer is not JSON"), "{e}");
    }

    #[test]
    fn other_answers_pass() {
        let v = parse_answer(raw::Function::PgExecute, br#"{"rows_affected":3}"#).unwrap();
        assert_eq!(v, json!({"rows_affected": 3}));
    }
}
