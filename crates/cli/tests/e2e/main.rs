//! The end-to-end tests of the `wasmgate` binary: each module drives the built
//! binary over its CLI, YAML, admin API and real HTTP, with real servers
//! (Redis, PostgreSQL, etcd, Jaeger, a registry, kube-apiserver) started by
//! `common` and its test kit.
//!
//! They are one test binary, not one per file: each binary compiled and
//! linked `common` and its HTTP client again, and 25 of them took 552 s of
//! a two-core machine's build (docs/architecture.md, "Tests"). Run one file's tests with
//! its module path: `cargo test --release -p wasmgate-cli --test e2e tls::`.

mod common;

mod access_log;
mod admin;
mod admin_safety;
mod cli;
mod client_faults;
mod cluster;
mod components;
mod connections;
mod differential;
mod envoy_semantics;
mod errors;
mod first_plugin;
mod gateway;
mod grpc_call;
mod higress;
mod higress_plugins;
mod kubernetes;
mod kubernetes_bench;
mod long_calls;
mod oci;
mod protocols;
mod reload;
mod sdk_compat;
mod security;
mod serve;
mod services;
mod tls;
mod tls_sessions;
mod tracing;
mod trust;
