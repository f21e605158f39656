//! The Extism host driven directly: its ABI, edge cases against the
//! reference, generated call sequences and the host-function fuzzer.
//!
//! One test binary, not one per file: each linked wasmtime again (about 40 s
//! of a two-core machine per binary). Run one file's tests by its module
//! path: `cargo test --release -p wasmgate-extism --test host fuzz_host::`.
//! The tests share one process, so a test that captures log lines does so
//! for its own thread (`tracing::subscriber::set_default`). The generated
//! sequences (`../reference_sequences/`) are a binary of their own: the
//! host's log level follows the process's subscribers, and the fuzzer's
//! (every level) would change what the reference comparison expects.

mod common;

mod abi;
mod edges;
mod fuzz_host;
