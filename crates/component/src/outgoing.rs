//! `wasi:http/outgoing-handler`: a component's requests go out through the
//! host's pooled client (`wasmgate_services::outbound_http`, the one Extism
//! plugins use), and only to the hosts the operator allowed. A denied host
//! is the `HTTP-request-denied` error code, which the guest sees at once
//! (not a hang, not a trap).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use wasmgate_services::outbound_http::{self, AllowedHosts, OutboundBody};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// The bound of an outgoing request whose guest set no first-byte timeout:
/// the request's own deadline ends it sooner when there is one.
const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn std::future::Future<Output = Result<(), Error>> + Send>,
)>;

pub(crate) struct Outgoing {
    pub allowed: Arc<AllowedHosts>,
}

impl WasiHttpHooks for Outgoing {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Box<dyn std::future::Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn std::future::Future<Output = SendResult> + Send> {
        let host = request.uri().host().unwrap_or_default();
        if !self.allowed.allows(host) {
            tracing::debug!(
                host,
                "a component's outgoing request was denied (not in allowed_hosts)"
            );
            return Box::new(std::future::ready(Err(Error::HttpRequestDenied)));
        }
        let first_byte = options
            .and_then(|o| o.first_byte_timeout)
            .unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT);
        Box::new(async move {
            let request = request.map(|body| OutboundBody::new(body.map_err(Into::into)));
            let response =
                tokio::time::timeout(first_byte, outbound_http::client().request(request))
                    .await
                    .map_err(|_| Error::HttpResponseTimeout)?
                    .map_err(client_error)?;
            let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
            // The pooled client drives its connections itself: nothing is
            // left for the caller to await.
            let io: Box<dyn std::future::Future<Output = Result<(), Error>> + Send> =
                Box::new(std::future::ready(Ok(())));
            Ok((response, io))
        })
    }
}

/// The `wasi:http` error code closest to why the client failed.
fn client_error(error: hyper_util::client::legacy::Error) -> Error {
    let causes = || {
        let first: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&error);
        std::iter::successors(first, |e| e.source())
    };
    if error.is_connect() {
        let refused = causes().any(|e| {
            e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        });
        return match refused {
            true => Error::ConnectionRefused,
            false => Error::DestinationUnavailable,
        };
    }
    match causes().find_map(|e| e.downcast_ref::<hyper::Error>()) {
        Some(e) if e.is_timeout() => Error::HttpResponseTimeout,
        Some(_) => Error::HttpProtocolError,
        None => Error::InternalError(Some(format!("{error:#}"))),
    }
}
