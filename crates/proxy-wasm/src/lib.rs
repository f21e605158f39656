//! The Proxy-Wasm host ABI (Envoy's filter ABI, versions 0.1.0 to 0.2.1 and
//! Higress's 0.2.100) on the wasmgate runtime.
//!
//! A [`FilterPlugin`] is a module plus its VM and plugin configuration and a
//! pool of configured instances; [`FilterPlugin::stream`] runs one HTTP
//! stream's callbacks (`proxy_on_request_headers` ... `proxy_on_done`) on a
//! leased instance, lending it the [`HttpExchange`] the filter reads and edits.
//! The host functions are all in [`host_env`]; what they may make the host
//! hold for a filter is capped by [`limits`].

pub mod abi;
mod batch;
mod callout;
mod config;
mod error;
mod exchange;
mod exports;
mod filter_shared;
mod giving;
mod grpc_call;
mod grpc_stream;
mod header_names;
pub mod headers;
pub mod host_env;
pub mod http_call;
mod instance;
pub mod limits;
pub mod pairs;
mod plugin;
mod properties;
mod redis_call;
mod root;
pub mod shared;
mod state;
mod stream;

pub use abi::{AbiVersion, Action};
pub use config::FilterConfig;
pub use error::FilterError;
pub use exchange::{HttpExchange, LocalResponse, RequestInfo, TlsInfo, TraceIds, UpstreamFacts};
pub use headers::Headers;
pub use http_call::{
    CallFailure, HttpCallFuture, HttpCallRequest, HttpCallResponse, HttpCaller, HttpStreamFuture,
    HttpStreamRequest, HttpStreamResponse, StreamBody, StreamPart,
};
pub use limits::HostLimits;
pub use plugin::FilterPlugin;
pub use stream::{FilterStream, Flow, Whole};
pub use wasmgate_runtime::{PoolConfig, Runtime, RuntimeConfig};
