//! Outbound HTTP for plugins: the allow-list, and one pooled async client
//! shared by every plugin in the process (keep-alive connections are reused
//! across calls and instances), set up as the gateway's upstream clients
//! are: a connect timeout, `TCP_NODELAY`, idle connections closed after 30 s.
//! A request is bounded by the call's deadline, and by
//! [`DEFAULT_REQUEST_TIMEOUT`] for a call without one, so none hangs.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// Default cap on a response body, as in the reference runtime.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 50 * 1024 * 1024;
/// How long a connection may take to open (the gateway's upstream default).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
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

/// Host globs a plugin may reach (`*.example.com`, `localhost`, `*`).
#[derive(Clone, Debug, Default)]
pub(crate) struct AllowedHosts {
    patterns: Vec<(String, Option<glob::Pattern>)>,
}

impl AllowedHosts {
    pub fn new(hosts: &[String]) -> AllowedHosts {
        AllowedHosts {
            patterns: hosts
                .iter()
                .map(|h| (h.clone(), glob::Pattern::new(h).ok()))
                .collect(),
        }
    }

    pub fn allows(&self, host: &str) -> bool {
        self.patterns.iter().any(|(text, pattern)| match pattern {
            Some(p) => p.matches(host),
            None => text == host,
        })
    }
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

fn client() -> &'static HttpsClient {
    static CLIENT: OnceLock<HttpsClient> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("the ring provider supports the default protocol versions")
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector)
    })
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
        .body(Full::new(Bytes::from(body)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_globs() {
        let allowed = AllowedHosts::new(&["*.example.com".into(), "127.0.0.1".into()]);
        assert!(allowed.allows("api.example.com"));
        assert!(allowed.allows("127.0.0.1"));
        assert!(!allowed.allows("example.org"));
        assert!(
            !AllowedHosts::default().allows("127.0.0.1"),
            "no list, no hosts"
        );
        assert!(AllowedHosts::new(&["*".into()]).allows("anything"));
    }
}
