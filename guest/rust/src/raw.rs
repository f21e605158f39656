//! The import module `wasmgate:host/services` itself: JSON bytes in, JSON
//! bytes out, nothing interpreted. For requests the typed API does not build
//! (and tests of the host's error answers); [`crate::pg`] and
//! [`crate::redis`] are built on it.
//!
//! Each import is `(i64) -> i64`: a handle to an Extism memory block holding
//! the request, and a handle to a block holding the answer. Both blocks are
//! the guest's, as with `extism:host/user` functions: the request is freed
//! after the call, the answer once copied out.

use crate::Error;

/// One of the three imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    /// `redis`: `{"service", "command": [...]}` → `{"reply": ...}`.
    Redis,
    /// `pg_query`: `{"service", "sql", "params": [...]}` → `{"columns", "rows"}`.
    PgQuery,
    /// `pg_execute`: `{"service", "sql", "params": [...]}` → `{"rows_affected"}`.
    PgExecute,
}

impl Function {
    /// The import's name: `redis`, `pg_query` or `pg_execute`.
    pub fn name(self) -> &'static str {
        match self {
            Function::Redis => "redis",
            Function::PgQuery => "pg_query",
            Function::PgExecute => "pg_execute",
        }
    }

    /// The function an import name stands for.
    pub fn from_name(name: &str) -> Option<Function> {
        match name {
            "redis" => Some(Function::Redis),
            "pg_query" => Some(Function::PgQuery),
            "pg_execute" => Some(Function::PgExecute),
            _ => None,
        }
    }
}

/// Sends `request` (JSON text, not checked here) to `function` and returns
/// the host's answer bytes: the result, or `{"error": {...}}` for a failed
/// operation. `Err` only when the request could not be placed in Extism
/// memory.
pub fn call(function: Function, request: &[u8]) -> Result<Vec<u8>, Error> {
    imp::call(function, request)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::*;
    use crate::kind;
    use extism_pdk::Memory;

    #[link(wasm_import_module = "wasmgate:host/services")]
    extern "C" {
        #[link_name = "redis"]
        fn host_redis(request: u64) -> u64;
        #[link_name = "pg_query"]
        fn host_pg_query(request: u64) -> u64;
        #[link_name = "pg_execute"]
        fn host_pg_execute(request: u64) -> u64;
    }

    pub(super) fn call(function: Function, request: &[u8]) -> Result<Vec<u8>, Error> {
        let block = Memory::from_bytes(request).map_err(|e| {
            Error::guest(
                kind::ENCODE,
                format!("cannot place the request in memory: {e}"),
            )
        })?;
        if block.offset() == 0 && !request.is_empty() {
            return Err(Error::guest(
                kind::ENCODE,
                "cannot place the request in memory: Extism memory is full",
            ));
        }
        let answer = unsafe {
            match function {
                Function::Redis => host_redis(block.offset()),
                Function::PgQuery => host_pg_query(block.offset()),
                Function::PgExecute => host_pg_execute(block.offset()),
            }
        };
        block.free();
        match Memory::find(answer) {
            Some(block) => {
                let bytes = block.to_vec();
                block.free();
                Ok(bytes)
            }
            None => Err(Error::guest(
                kind::DECODE,
                format!("the host's {} answer is empty", function.name()),
            )),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::*;

    pub(super) fn call(function: Function, request: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(crate::testing::dispatch(function, request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind;

    #[test]
    fn names_round_trip() {
        for f in [Function::Redis, Function::PgQuery, Function::PgExecute] {
            assert_eq!(Function::from_name(f.name()), Some(f));
        }
        assert_eq!(Function::from_name("pg"), None);
    }

    #[test]
    fn natively_without_a_handler_calls_are_unavailable() {
        crate::testing::clear_host();
        let answer = call(Function::Redis, b"{}").unwrap();
        let e = crate::parse_answer(Function::Redis, &answer).unwrap_err();
        assert_eq!(e.kind, kind::UNAVAILABLE);
    }
}
