//! The Proxy-Wasm host driven directly: hand-written and SDK-built filters,
//! hostile guests, batched calls and the host-function fuzzer.
//!
//! One test binary, not one per file: each linked wasmtime again (about 40 s
//! of a two-core machine per binary). Run one file's tests by its module
//! path: `cargo test --release -p wasmgate-proxy-wasm --test host fuzz_host::`.

mod common;

mod batched_calls;
mod filters;
mod fuzz_host;
mod giving;
mod hostile;
mod long_calls;
mod startup;
