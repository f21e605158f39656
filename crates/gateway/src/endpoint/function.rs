//! The function endpoint: the request body (as the filters left it) is an
//! Extism plugin function's input, its output the answer. The function is
//! the route's, or the last segment of the path; the call is `serve`'s
//! (`FunctionRoute`), with the gateway's `error_details`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Response;
use wasmgate_extism::Plugin;

use crate::{FunctionRoute, FunctionRouteConfig};
use wasmgate_transport::body::{self, Body};

/// What a function call took, put in its answer's extensions while requests
/// are observed (the trace's span of the call).
#[derive(Clone, Debug)]
pub(crate) struct FunctionServed {
    pub plugin: String,
    pub function: String,
    pub started: Instant,
    pub elapsed: Duration,
}

/// The answer of `call`, with what the call took in its extensions while
/// requests are observed.
pub(crate) async fn timed<B>(
    plugin: &str,
    function: &str,
    call: impl std::future::Future<Output = Response<B>>,
) -> Response<B> {
    // One await: a future awaited at two places is kept twice in the
    // caller's state, and every request's handling future (which holds
    // this one) doubled in size.
    let started = wasmgate_observe::observing().then(Instant::now);
    // A recorded request's service calls made by the function hang under
    // its span: they are noted as this plugin's. Boxed, so the call is
    // not kept twice in the caller's state.
    let caller = started
        .filter(|_| wasmgate_services::calls::recording())
        .map(|_| Arc::<str>::from(plugin));
    let mut response = match caller {
        Some(caller) => Box::pin(wasmgate_services::calls::made_by(caller, call)).await,
        None => call.await,
    };
    if let Some(started) = started {
        response.extensions_mut().insert(FunctionServed {
            plugin: plugin.to_string(),
            function: function.to_string(),
            started,
            elapsed: started.elapsed(),
        });
    }
    response
}

/// An Extism plugin's function as a route's endpoint.
pub(crate) struct Function {
    pub plugin: Arc<Plugin>,
    /// `None`: the last segment of the request's path names it.
    pub function: Option<String>,
}

impl Function {
    /// Calls the function with `input`, for request `request_id`.
    pub(crate) async fn call(
        &self,
        path: &str,
        input: Bytes,
        request_id: u64,
        error_details: bool,
    ) -> Response<Body> {
        let function = self.function.clone().unwrap_or_else(|| {
            path.rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or_default()
                .to_string()
        });
        let config = FunctionRouteConfig {
            error_details,
            ..Default::default()
        };
        let route = FunctionRoute::new(self.plugin.clone(), config);
        let call = route.call(request_id, &function, &input);
        body::full_response(timed(self.plugin.name(), &function, call).await)
    }
}
