//! Outbound HTTP for plugins of every ABI: the allow-list of hosts a plugin
//! may reach, and one pooled client shared by every plugin in the process
//! (keep-alive connections are reused across calls, instances and ABIs),
//! set up as the gateway's upstream clients are: a connect timeout,
//! `TCP_NODELAY`, idle connections closed after 30 s, TLS with Mozilla's
//! roots. Extism's `http_request` and a component's
//! `wasi:http/outgoing-handler` both send through [`client`].

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long a connection may take to open (the gateway's upstream default).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Any request body: a whole one (Extism) or a guest's stream (components).
pub type OutboundBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub type HttpsClient = Client<HttpsConnector<HttpConnector>, OutboundBody>;

/// Host globs a plugin may reach (`*.example.com`, `localhost`, `*`).
/// Empty: none.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
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

/// The process's client for plugins' requests (`http://` and `https://`).
pub fn client() -> &'static HttpsClient {
    static CLIENT: OnceLock<HttpsClient> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.enforce_http(false);
        // The roots every TLS client of wasmgate trusts (wasmgate_base::tls).
        let tls = wasmgate_base::tls::client_config(None)
            .expect("the ring provider supports the default protocol versions");
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector)
    })
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
