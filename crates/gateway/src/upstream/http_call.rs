//! `proxy_http_call` (and Higress's `http_call` helpers) through the
//! gateway's upstreams: a Proxy-Wasm filter names an upstream (Envoy's
//! cluster) and gets the whole answer back.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmgate_proxy_wasm::{Headers, HttpCallFuture, HttpCallRequest, HttpCallResponse, HttpCaller};

use super::{OutboundBody, RequestHead, Upstream};

/// `proxy_http_call` through the gateway's upstreams.
#[derive(Debug)]
pub(crate) struct UpstreamCaller {
    pub(crate) upstreams: Arc<HashMap<String, Arc<Upstream>>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Upstream({})", self.name)
    }
}

impl HttpCaller for UpstreamCaller {
    fn has_upstream(&self, upstream: &str) -> bool {
        self.upstreams.contains_key(upstream)
    }

    fn call(&self, request: HttpCallRequest) -> HttpCallFuture {
        let upstream = self.upstreams.get(&request.upstream).cloned();
        Box::pin(async move {
            let upstream = upstream.ok_or("unknown upstream")?;
            let get = |name: &str| {
                request
                    .headers
                    .get(name.as_bytes())
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            };
            let method = get(":method").unwrap_or_else(|| "GET".into());
            let mut headers = request.headers.map().clone();
            if let Some(authority) = get(":authority") {
                if let Ok(value) = authority.parse() {
                    headers.insert(hyper::header::HOST, value);
                }
            }
            let head = RequestHead {
                method: method
                    .parse()
                    .map_err(|_| format!("bad method `{method}`"))?,
                path: get(":path").unwrap_or_else(|| "/".into()),
                headers,
            };
            let body = OutboundBody::Replayable(Bytes::from(request.body));
            let response = upstream
                .send(head, body, None)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let mut headers = Headers::from_map(parts.headers);
            headers.push_pseudo(":status", parts.status.as_str().as_bytes().to_vec());
            let collected = body
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?;
            let trailers = collected
                .trailers()
                .map(|t| Headers::from_map(t.clone()))
                .unwrap_or_default();
            Ok(HttpCallResponse {
                headers,
                body: collected.to_bytes().to_vec(),
                trailers,
            })
        })
    }
}
