//! The node's limits (`limits`): request sizes and timeouts, connections,
//! HTTP/2, threads, and what a Proxy-Wasm filter may hold of the host
//! (`limits.proxy_wasm`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest request body a filter may buffer or a function may receive (413 beyond).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Time a client has to send its request headers (and, on a new
    /// connection, its first byte); the connection is closed after it.
    #[serde(default = "default_header_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// Longest pause in a request body before the request fails with 408.
    #[serde(default = "default_body_timeout_ms")]
    pub body_read_timeout_ms: u64,
    /// Connections each listener holds at once (a listener's own
    /// `max_connections` overrides it); one more is closed as soon as it is
    /// accepted, and counted (`wasmgate_listener_connections_refused_total`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// An HTTP/2 connection with no open stream for this long gets a GOAWAY
    /// and is closed (HTTP/1.1's keep-alive connections are closed after
    /// `header_read_timeout_ms` without a request).
    #[serde(default = "default_http2_idle_timeout_ms")]
    pub http2_idle_timeout_ms: u64,
    /// A PING to an HTTP/2 client after this long without a frame from it
    /// (0: never); without its ACK within `http2_keepalive_timeout_ms` the
    /// connection is closed.
    #[serde(default = "default_http2_keepalive_interval_ms")]
    pub http2_keepalive_interval_ms: u64,
    #[serde(default = "default_http2_keepalive_timeout_ms")]
    pub http2_keepalive_timeout_ms: u64,
    /// Streams an HTTP/2 client may have open at once on one connection.
    #[serde(default = "default_http2_max_concurrent_streams")]
    pub http2_max_concurrent_streams: u32,
    /// Largest HTTP/2 request header list (decoded), which also bounds
    /// CONTINUATION frames; a larger one is refused.
    #[serde(default = "default_http2_max_header_list_bytes")]
    pub http2_max_header_list_bytes: u32,
    /// Worker threads (default: one per CPU).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Threads for guest calls that run longer than 1 ms, at a lower CPU
    /// priority (default: one per CPU but one, so a core stays free for
    /// request handling).
    #[serde(default)]
    pub long_call_threads: Option<usize>,
    /// Nice value (0-19) of those threads: how much of a busy CPU long calls
    /// get against request handling (default 2: about two fifths against one
    /// busy worker; docs/architecture.md, "The slow lane").
    #[serde(default)]
    pub long_call_nice: Option<i32>,
    /// What the host holds for a Proxy-Wasm filter outside its memory:
    /// call replies, calls in flight, gRPC stream queues, shared data and
    /// queues (docs/proxy-wasm.md, "Host limits"). Reloaded with the plugins.
    #[serde(default)]
    pub proxy_wasm: ProxyWasmLimits,
    /// How long a running node's build waits for a `wasi:http` component
    /// to compile before it serves without it: the component's routes
    /// answer 503 (`plugin_starting`) until its compile ends, and the node
    /// then reloads (docs/gateway.md, "Components that compile in the
    /// background"). `wasmgate check` always waits.
    #[serde(default = "default_component_compile_wait_ms")]
    pub component_compile_wait_ms: u64,
    /// The same for a Proxy-Wasm filter's start (its first instance,
    /// `proxy_on_vm_start`, `proxy_on_configure`): a route whose new filter
    /// has not started after this answers 503 (`plugin_starting`), or is
    /// served by the filter's version before, until the start ends and the
    /// node reloads (docs/gateway.md, "Filters that start in the
    /// background"). Higress's WAF with the OWASP rules takes about a
    /// minute; ordinary filters start in milliseconds.
    #[serde(default = "default_filter_start_wait_ms")]
    pub filter_start_wait_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_max_body(),
            header_read_timeout_ms: default_header_timeout_ms(),
            body_read_timeout_ms: default_body_timeout_ms(),
            max_connections: default_max_connections(),
            http2_idle_timeout_ms: default_http2_idle_timeout_ms(),
            http2_keepalive_interval_ms: default_http2_keepalive_interval_ms(),
            http2_keepalive_timeout_ms: default_http2_keepalive_timeout_ms(),
            http2_max_concurrent_streams: default_http2_max_concurrent_streams(),
            http2_max_header_list_bytes: default_http2_max_header_list_bytes(),
            threads: None,
            long_call_threads: None,
            long_call_nice: None,
            proxy_wasm: ProxyWasmLimits::default(),
            component_compile_wait_ms: default_component_compile_wait_ms(),
            filter_start_wait_ms: default_filter_start_wait_ms(),
        }
    }
}

fn default_component_compile_wait_ms() -> u64 {
    2_000
}

fn default_filter_start_wait_ms() -> u64 {
    10_000
}

fn default_max_body() -> usize {
    16 * 1024 * 1024
}

fn default_header_timeout_ms() -> u64 {
    30_000
}

fn default_body_timeout_ms() -> u64 {
    30_000
}

fn default_max_connections() -> usize {
    10_000
}

fn default_http2_idle_timeout_ms() -> u64 {
    60_000
}

fn default_http2_keepalive_interval_ms() -> u64 {
    30_000
}

fn default_http2_keepalive_timeout_ms() -> u64 {
    10_000
}

fn default_http2_max_concurrent_streams() -> u32 {
    128
}

fn default_http2_max_header_list_bytes() -> u32 {
    64 * 1024
}

/// Caps on what a Proxy-Wasm filter can make the host hold for it. A call
/// over one is refused with a status the SDKs handle, counted in
/// `wasmgate_plugin_host_limit_refusals_total{limit}` and logged.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyWasmLimits {
    /// Largest body of a `proxy_http_call` or `proxy_grpc_call` reply (4
    /// MiB); a longer one is not read further, and the call fails
    /// (status 8, RESOURCE_EXHAUSTED).
    #[serde(default = "default_call_reply_bytes")]
    pub call_reply_bytes: usize,
    /// Calls and gRPC streams one context (a request's, or a root's) has in
    /// flight at once (64); one more is refused (InternalFailure).
    #[serde(default = "default_calls_in_flight")]
    pub calls_in_flight: usize,
    /// Bytes one gRPC stream holds that the connection has not sent yet (4
    /// MiB); a `proxy_grpc_send` beyond it is refused (BadArgument).
    #[serde(default = "default_grpc_send_queue_bytes")]
    pub grpc_send_queue_bytes: usize,
    /// The same, in messages (1024).
    #[serde(default = "default_grpc_send_queue_messages")]
    pub grpc_send_queue_messages: usize,
    /// Bytes of gRPC stream messages received for one context that its
    /// filter has not heard yet (8 MiB); beyond it the servers wait (HTTP/2
    /// flow control). One message always fits.
    #[serde(default = "default_grpc_receive_bytes")]
    pub grpc_receive_bytes: usize,
    /// Largest shared-data entry, key and value together (1 MiB): a larger
    /// `proxy_set_shared_data` is refused (BadArgument).
    #[serde(default = "default_shared_data_value_bytes")]
    pub shared_data_value_bytes: usize,
    /// Keys and values of one VM id's shared data (32 MiB): a set that
    /// grows it beyond is refused (InternalFailure).
    #[serde(default = "default_shared_data_bytes")]
    pub shared_data_bytes: usize,
    /// Keys of one VM id's shared data (65536): a new one beyond is refused
    /// (InternalFailure).
    #[serde(default = "default_shared_data_keys")]
    pub shared_data_keys: usize,
    /// Shared queues one VM id registers (16): one more is refused
    /// (InternalFailure).
    #[serde(default = "default_shared_queues")]
    pub shared_queues: usize,
    /// Items waiting in one shared queue (10000): an enqueue beyond is
    /// refused (NotFound, the one failure the SDKs expect there).
    #[serde(default = "default_shared_queue_items")]
    pub shared_queue_items: usize,
    /// Bytes waiting in one shared queue (4 MiB): an enqueue beyond is
    /// refused (NotFound).
    #[serde(default = "default_shared_queue_bytes")]
    pub shared_queue_bytes: usize,
}

impl Default for ProxyWasmLimits {
    fn default() -> Self {
        ProxyWasmLimits {
            call_reply_bytes: default_call_reply_bytes(),
            calls_in_flight: default_calls_in_flight(),
            grpc_send_queue_bytes: default_grpc_send_queue_bytes(),
            grpc_send_queue_messages: default_grpc_send_queue_messages(),
            grpc_receive_bytes: default_grpc_receive_bytes(),
            shared_data_value_bytes: default_shared_data_value_bytes(),
            shared_data_bytes: default_shared_data_bytes(),
            shared_data_keys: default_shared_data_keys(),
            shared_queues: default_shared_queues(),
            shared_queue_items: default_shared_queue_items(),
            shared_queue_bytes: default_shared_queue_bytes(),
        }
    }
}

fn default_call_reply_bytes() -> usize {
    4 << 20
}

fn default_calls_in_flight() -> usize {
    64
}

fn default_grpc_send_queue_bytes() -> usize {
    4 << 20
}

fn default_grpc_send_queue_messages() -> usize {
    1024
}

fn default_grpc_receive_bytes() -> usize {
    8 << 20
}

fn default_shared_data_value_bytes() -> usize {
    1 << 20
}

fn default_shared_data_bytes() -> usize {
    32 << 20
}

fn default_shared_data_keys() -> usize {
    65_536
}

fn default_shared_queues() -> usize {
    16
}

fn default_shared_queue_items() -> usize {
    10_000
}

fn default_shared_queue_bytes() -> usize {
    4 << 20
}
