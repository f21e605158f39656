//! `wasmgate run` as a process, with Proxy-Wasm filters built from source by
//! the official Rust and Go SDKs, in front of real HTTP upstreams started by
//! the tests. Each test reproduces what the SDK example documents. One module
//! a concern: routing, the SDKs' examples, what a filter sees and its
//! crashes, upstream nodes, and the command line.

mod command_line;
mod filters;
mod routing;
mod sdk_examples;
mod upstreams;
