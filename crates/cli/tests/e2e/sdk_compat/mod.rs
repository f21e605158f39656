//! Plugins from the other SDKs wasmgate supports (docs/compatibility.md), built
//! from source by plugins/build.sh, held to the behaviours the Rust and Go
//! plugins' tests check (gateway/, serve.rs):
//!
//! - Proxy-Wasm filters from the AssemblyScript SDK (@solo-io/proxy-runtime,
//!   `as_filters`) and the C++ SDK (`cpp_filters`), through `wasmgate run`:
//!   one module each, one filter per root id, with the same contracts
//!   (plugins/proxy-wasm/assemblyscript/filters, plugins/proxy-wasm/cpp/filters);
//! - Extism plugins from the AssemblyScript PDK (`as_hello`) and the C PDK
//!   (`c_hello`), through `wasmgate serve`, answering byte for byte as the
//!   Rust `hello` and `count_vowels` do, and as the official runtime does.
//!
//! Every filter runs capped at 8 MiB of linear memory: a guest that corrupts
//! its own heap tends to show as runaway growth (an AssemblyScript filter
//! that keeps the SDK's onConfigure, with an empty configuration, fails at
//! start-up or grows to 14 MB; see docs/compatibility.md).
//!
//! One module a plugin kind: `proxy_wasm` (the filters), `extism` (the PDKs).

mod extism;
mod proxy_wasm;
