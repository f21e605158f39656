//! The third plugin kind: components of the `wasi:http/proxy` world (what
//! `wasmtime serve`, Spin and wasmCloud run), beside Extism plugins and
//! Proxy-Wasm filters, on the same runtime.
//!
//! The WASI HTTP implementation is wasmtime's own (`wasmtime-wasi-http`, at
//! the runtime's version); this crate is the host around it, and it shares
//! what the other ABIs share: the engine, its pooling allocator and compile
//! cache, epochs for deadlines, the slow lane for long calls, instance
//! pools (bounded, with crash-loop backoff), memory caps, statistics and
//! crash reports (`wasmgate-runtime`), and the outbound HTTP client and
//! allow-list (`wasmgate-services`).
//!
//! - [`ComponentPlugin`] (`plugin.rs`): a loaded component, pre-linked once;
//!   each request gets a fresh instance (the `wasi:http` contract: nothing
//!   of one request is seen by another), made from the pool's
//!   copy-on-write memory images.
//! - `state.rs`: what one request's store holds (WASI, HTTP, limits).
//! - `outgoing.rs`: `wasi:http/outgoing-handler` through the host's client,
//!   with the plugin's allow-list.

mod outgoing;
mod plugin;
mod response_body;
mod state;

pub use plugin::{ComponentError, ComponentOptions, ComponentPlugin, Preopen};
pub use response_body::{CutBody, ResponseBody};
pub use wasmtime_wasi_http::p2::bindings::http::types::Scheme;

/// Whether `bytes` (a file's first bytes are enough) are a component rather
/// than a core module: the binary format's layer field (bytes 6-7) is 1.
pub fn is_component(bytes: &[u8]) -> bool {
    wasmgate_runtime::is_component(bytes)
}

/// Whether the file at `path` holds a component: its first 8 bytes say so
/// for wasm; a precompiled artifact (`wasmgate compile`, an ELF object) is
/// asked of wasmtime. A file that cannot be read is not, and its loader
/// reports why.
pub fn is_component_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut head));
    if read.is_err() {
        return false;
    }
    if head.starts_with(b"\x7fELF") {
        return std::fs::read(path).is_ok_and(|bytes| {
            wasmtime::Engine::detect_precompiled(&bytes) == Some(wasmtime::Precompiled::Component)
        });
    }
    is_component(&head)
}
