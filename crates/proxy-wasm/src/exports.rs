//! The guest's callback exports ([`Exports`]), looked up and typed once per
//! instance, and the guest calls made on them ([`Callback`]): what
//! `instance.rs` runs and `stream.rs` and `root.rs` ask for.

use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, Result};
use wasmtime::{Instance, Store, TypedFunc, WasmParams, WasmResults};

use crate::batch::Batched;
use crate::state::FilterState;

/// A guest call to make on an instance's store, owning what it needs so
/// that [`FilterInstance::run`](crate::instance::FilterInstance::run) can
/// take it to another thread.
pub(crate) trait Callback: Send + 'static {
    type Output: Send + 'static;
    fn call(
        self,
        store: &mut Store<FilterState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Output>> + Send + '_;
}

/// An export of the instance picked from its shared table at call time, with
/// its arguments: the callbacks every request makes. (Taking a `TypedFunc`
/// along instead would clone it, several atomic reference counts each time.)
pub(crate) struct ExportCall<P: 'static, R: 'static> {
    pub exports: Arc<Exports>,
    pub pick: PickExport<P, R>,
    pub params: P,
}

/// Which export an [`ExportCall`] calls.
pub(crate) type PickExport<P, R> = fn(&Exports) -> Option<&TypedFunc<P, R>>;

impl<P, R> Callback for ExportCall<P, R>
where
    P: WasmParams + Send + Sync + 'static,
    R: WasmResults + Send + Sync + 'static,
{
    type Output = R;
    async fn call(self, store: &mut Store<FilterState>) -> wasmtime::Result<R> {
        match (self.pick)(&self.exports) {
            Some(f) => f.call_async(store, self.params).await,
            None => Err(wasmtime::format_err!("the plugin has no such callback")),
        }
    }
}

/// An export (already cloned) called with its arguments: the callbacks that
/// come rarely (ticks, queues, http call responses).
impl<P, R> Callback for (TypedFunc<P, R>, P)
where
    P: WasmParams + Send + Sync + 'static,
    R: WasmResults + Send + Sync + 'static,
{
    type Output = R;
    fn call(
        self,
        store: &mut Store<FilterState>,
    ) -> impl Future<Output = wasmtime::Result<R>> + Send + '_ {
        let (f, params) = self;
        async move { f.call_async(store, params).await }
    }
}

type StreamCallback = Option<TypedFunc<(u32, u32, u32), i32>>;
/// (context, token, header count, body size, trailer count)
type CallResponseCallback = Option<TypedFunc<(u32, u32, u32, u32, u32), ()>>;
/// (root context, token, status, reply size)
type RedisResponseCallback = Option<TypedFunc<(u32, u32, u32, u32), ()>>;
/// (context, token, message size or status code)
type GrpcCallback = Option<TypedFunc<(u32, u32, u32), ()>>;

/// The callbacks, typed once per instance; a missing one is skipped.
pub(crate) struct Exports {
    pub context_create: TypedFunc<(u32, u32), ()>,
    pub request_headers: StreamCallback,
    pub request_body: StreamCallback,
    pub request_trailers: Option<TypedFunc<(u32, u32), i32>>,
    pub response_headers: StreamCallback,
    pub response_body: StreamCallback,
    pub response_trailers: Option<TypedFunc<(u32, u32), i32>>,
    pub log: Option<TypedFunc<u32, ()>>,
    pub done: Option<TypedFunc<u32, i32>>,
    pub delete: Option<TypedFunc<u32, ()>>,
    pub tick: Option<TypedFunc<u32, ()>>,
    pub queue_ready: Option<TypedFunc<(u32, u32), ()>>,
    pub http_call_response: CallResponseCallback,
    pub redis_call_response: RedisResponseCallback,
    pub grpc_receive: GrpcCallback,
    pub grpc_close: GrpcCallback,
    /// (context, token, metadata count): a gRPC stream's metadata.
    pub grpc_initial_metadata: GrpcCallback,
    pub grpc_trailing_metadata: GrpcCallback,
    /// The calls the host makes back to back, each pair or triple as one
    /// guest call (`batch.rs`); `None` if the filter lacks one of them.
    pub batched: Option<Batched>,
}

impl Exports {
    pub(crate) fn find(store: &mut Store<FilterState>, instance: &Instance) -> Result<Exports> {
        let mut callback = |name: &str| {
            instance
                .get_typed_func::<(u32, u32, u32), i32>(&mut *store, name)
                .ok()
        };
        let request_headers = callback("proxy_on_request_headers");
        let request_body = callback("proxy_on_request_body");
        let response_headers = callback("proxy_on_response_headers");
        let response_body = callback("proxy_on_response_body");
        let mut get = |name: &str| instance.get_func(&mut *store, name);
        let (log, done, delete, tick) = (
            get("proxy_on_log"),
            get("proxy_on_done"),
            get("proxy_on_delete"),
            get("proxy_on_tick"),
        );
        let (request_trailers, response_trailers, queue_ready, call_response) = (
            get("proxy_on_request_trailers"),
            get("proxy_on_response_trailers"),
            get("proxy_on_queue_ready"),
            get("proxy_on_http_call_response"),
        );
        let redis_response = get("proxy_on_redis_call_response");
        let (grpc_receive, grpc_close) = (get("proxy_on_grpc_receive"), get("proxy_on_grpc_close"));
        let (grpc_initial_metadata, grpc_trailing_metadata) = (
            get("proxy_on_grpc_receive_initial_metadata"),
            get("proxy_on_grpc_receive_trailing_metadata"),
        );
        // An export with the wrong signature is refused up front rather than
        // trapping on the first request.
        let exports = (|| -> wasmtime::Result<Exports> {
            Ok(Exports {
                context_create: instance.get_typed_func(&mut *store, "proxy_on_context_create")?,
                request_headers,
                request_body,
                request_trailers: typed(&*store, request_trailers)?,
                response_headers,
                response_body,
                response_trailers: typed(&*store, response_trailers)?,
                log: typed(&*store, log)?,
                done: typed(&*store, done)?,
                delete: typed(&*store, delete)?,
                tick: typed(&*store, tick)?,
                queue_ready: typed(&*store, queue_ready)?,
                http_call_response: typed(&*store, call_response)?,
                redis_call_response: typed(&*store, redis_response)?,
                grpc_receive: typed(&*store, grpc_receive)?,
                grpc_close: typed(&*store, grpc_close)?,
                grpc_initial_metadata: typed(&*store, grpc_initial_metadata)?,
                grpc_trailing_metadata: typed(&*store, grpc_trailing_metadata)?,
                batched: None,
            })
        })();
        exports
            .map_err(anyhow::Error::from)
            .context("a Proxy-Wasm callback export has the wrong signature")
    }
}

fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &Store<FilterState>,
    f: Option<wasmtime::Func>,
) -> wasmtime::Result<Option<TypedFunc<P, R>>> {
    f.map(|f| f.typed(store)).transpose()
}
