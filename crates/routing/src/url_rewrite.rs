//! A route's own URL changes (`rewrite`; the Gateway API's URLRewrite):
//! the path replaced whole or by its prefix, the query kept, the host
//! replaced in `Host` and, for HTTP/2, in `:authority`. Applied before the
//! filters, so they and the endpoint see the URL the upstream gets.

use hyper::header::{HeaderValue, HOST};
use hyper::http::request::Parts;
use hyper::http::uri::{Authority, PathAndQuery};
use hyper::Uri;
use wasmgate_config::{ReplacePrefix, Rewrite};

pub struct UrlRewriter {
    path: Option<String>,
    replace_prefix: Option<ReplacePrefix>,
    host: Option<(Authority, HeaderValue)>,
}

impl UrlRewriter {
    /// None when the route changes nothing (values were checked with the
    /// configuration).
    pub fn new(rewrite: Option<&Rewrite>) -> Option<Box<UrlRewriter>> {
        let rewrite = rewrite?;
        let host = (rewrite.host.as_deref())
            .and_then(|h| Some((Authority::try_from(h).ok()?, HeaderValue::from_str(h).ok()?)));
        Some(Box::new(UrlRewriter {
            path: rewrite.path.clone(),
            replace_prefix: rewrite.replace_prefix.clone(),
            host,
        }))
    }

    pub fn apply(&self, parts: &mut Parts) {
        let path = match (&self.path, &self.replace_prefix) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(prefix)) => prefix.apply(parts.uri.path()),
            (None, None) => None,
        };
        if path.is_none() && self.host.is_none() {
            return;
        }
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        if let Some(path) = path {
            let with_query = match uri.path_and_query.as_ref().and_then(|p| p.query()) {
                Some(query) => format!("{path}?{query}"),
                None => path,
            };
            if let Ok(p) = PathAndQuery::try_from(with_query) {
                uri.path_and_query = Some(p);
            }
        }
        if let Some((authority, value)) = &self.host {
            if uri.authority.is_some() {
                uri.authority = Some(authority.clone());
            }
            parts.headers.insert(HOST, value.clone());
        }
        parts.uri = Uri::from_parts(uri).unwrap_or_else(|_| Uri::from_static("/"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(rewrite: &str, uri: &str) -> (String, Option<String>) {
        let rewrite: Rewrite = serde_json::from_str(rewrite).unwrap();
        let (mut parts, ()) = hyper::Request::builder()
            .uri(uri)
            .body(())
            .unwrap()
            .into_parts();
        UrlRewriter::new(Some(&rewrite)).unwrap().apply(&mut parts);
        let host = parts
            .headers
            .get(HOST)
            .map(|h| h.to_str().unwrap().to_string());
        (parts.uri.to_string(), host)
    }

    #[test]
    fn paths_are_replaced_whole_or_by_prefix_and_the_query_kept() {
        let prefix = r#"{"replace_prefix": {"from": "/api", "to": "/v2"}}"#;
        assert_eq!(rewritten(prefix, "/api/items?x=1").0, "/v2/items?x=1");
        assert_eq!(rewritten(prefix, "/apix").0, "/apix", "not a whole segment");
        assert_eq!(rewritten(r#"{"path": "/fixed"}"#, "/a/b?q").0, "/fixed?q");
        // HTTP/2 carries the host in the URI: both change.
        let (uri, host) = rewritten(
            r#"{"host": "internal.example:8080"}"#,
            "https://public.example/x",
        );
        assert_eq!(uri, "https://internal.example:8080/x");
        assert_eq!(host.as_deref(), Some("internal.example:8080"));
    }
}
