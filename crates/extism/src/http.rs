//! Extism's `http_request`: the PDK's JSON request sent, if its host is
//! allowed, with the client every ABI shares
//! (`wasmgate_services::outbound_http`). A request is bounded by the call's
//! deadline, and by [`DEFAULT_REQUEST_TIMEOUT`] for a call without one, so
//! none hangs.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;
pub(crate) use wasmgate_services::outbound_http::AllowedHosts;
use wasmgate_services::outbound_http::{client, OutboundBody};

/// Default cap on a response body, as in the reference runtime.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 50 * 1024 * 1024;
/// The bound of a request made by a call that has no deadline of its own.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The request a PDK serialises for `http_request` (fields other PDKs may add are ignored).
#[derive(Debug, Deserialize)]
pub(crate) struct PluginRequest {
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub method: Option<String>,
}

pub(crate) struct PluginResponse {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("HTTP request to {0} is not allowed")]
    NotAllowed(String),
    #[error("Invalid URL: {0}")]
    InvalidUrl(String),
    #[error("timeout")]
    Timeout,
    #[error("HTTP response exceeds the configured maximum number of bytes: {0}")]
    TooLarge(u64),
    #[error("HTTP request to {url} failed: {reason}")]
    Failed { url: String, reason: String },
}

/// Sends a plugin's request if its host is allowed, within `timeout`, and reads
/// at most `max_body` bytes of the response.
pub(crate) async fn send(
    request: PluginRequest,
    body: Vec<u8>,
    allowed: &AllowedHosts,
    timeout: Option<Duration>,
    max_body: u64,
) -> Result<PluginResponse, HttpError> {
    let url = url::Url::parse(&request.url).map_err(|e| HttpError::InvalidUrl(format!("{e:?}")))?;
    if !allowed.allows(url.host_str().unwrap_or_default()) {
        return Err(HttpError::NotAllowed(request.url));
    }
    let failed = |reason: String| HttpError::Failed {
        url: request.url.clone(),
        reason,
    };
    let method = request.method.as_deref().unwrap_or("GET").to_uppercase();
    let mut builder = hyper::Request::builder()
        .method(method.as_str())
        .uri(url.as_str());
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let http_request = builder
        .body(OutboundBody::new(
            Full::new(Bytes::from(body)).map_err(|never| match never {}),
        ))
        .map_err(|e| failed(e.to_string()))?;

    let exchange = async {
        let response = client()
            .request(http_request)
            .await
            .map_err(|e| failed(format!("{e:#}")))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let body = Limited::new(response.into_body(), max_body as usize)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    HttpError::TooLarge(max_body)
                } else {
                    failed(e.to_string())
                }
            })?
            .to_bytes();
        Ok(PluginResponse {
            status,
            headers,
            body,
        })
    };
    tokio::time::timeout(timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT), exchange)
        .await
        .unwrap_or(Err(HttpError::Timeout))
}
