//! The redirect endpoint (`redirect:`): the request's own URL with the
//! parts the route gives replaced, as `Location` on a 301 (or the status
//! given). `{scheme: https}` on a plain listener's routes is the usual
//! HTTP-to-HTTPS redirect.

use hyper::header::{HeaderValue, LOCATION};
use hyper::{Response, StatusCode};
use wasmgate_config::Redirect;

use super::Target;
use wasmgate_transport::body::{self, Body};

/// The answer that sends `target`'s client where `redirect` says.
pub(crate) fn answer(redirect: &Redirect, target: &Target<'_>) -> Response<Body> {
    let scheme = redirect.scheme.as_deref().unwrap_or(target.scheme);
    // The request's host without its port: a redirect to another scheme
    // goes to that scheme's port unless one is given.
    let host = match &redirect.host {
        Some(host) => host.as_str(),
        None => host_without_port(target.authority),
    };
    let port = redirect.port.map(|p| format!(":{p}")).unwrap_or_default();
    let replaced;
    let path = match (&redirect.path, &redirect.replace_prefix) {
        (Some(path), _) => path.as_str(),
        (None, Some(prefix)) => {
            let (path, query) = match target.path_and_query.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (target.path_and_query, None),
            };
            replaced = match (prefix.apply(path), query) {
                (Some(new), Some(query)) => format!("{new}?{query}"),
                (Some(new), None) => new,
                (None, _) => target.path_and_query.to_string(),
            };
            replaced.as_str()
        }
        (None, None) => target.path_and_query,
    };
    let location = format!("{scheme}://{host}{port}{path}");
    let status = StatusCode::from_u16(redirect.status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    let mut response = Response::new(body::empty());
    *response.status_mut() = status;
    match HeaderValue::try_from(location) {
        Ok(location) => {
            response.headers_mut().insert(LOCATION, location);
            response
        }
        Err(_) => body::full_response(wasmgate_answers::error_response::simple(
            StatusCode::BAD_REQUEST,
            "bad_redirect",
            "the request's host or path cannot be written into a Location header",
        )),
    }
}

fn host_without_port(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        // An IPv6 literal's colons are inside brackets.
        Some((host, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(redirect: &str, scheme: &str, authority: &str, path: &str) -> String {
        let redirect: Redirect = serde_json::from_str(redirect).unwrap();
        let target = Target {
            scheme,
            authority,
            path_and_query: path,
        };
        let response = answer(&redirect, &target);
        response.headers()[LOCATION].to_str().unwrap().to_string()
    }

    #[test]
    fn the_request_url_with_the_given_parts_replaced() {
        assert_eq!(
            location(
                r#"{"scheme": "https"}"#,
                "http",
                "example.com:8080",
                "/a?b=1"
            ),
            "https://example.com/a?b=1"
        );
        assert_eq!(
            location(
                r#"{"scheme": "https", "port": 8443}"#,
                "http",
                "[::1]:80",
                "/"
            ),
            "https://[::1]:8443/"
        );
        assert_eq!(
            location(
                r#"{"host": "new.example", "path": "/moved"}"#,
                "https",
                "old.example",
                "/x"
            ),
            "https://new.example/moved"
        );
        assert_eq!(
            location(
                r#"{"replace_prefix": {"from": "/old", "to": "/new"}}"#,
                "https",
                "example.com",
                "/old/page?x=1"
            ),
            "https://example.com/new/page?x=1"
        );
    }
}
