//! A route's changes to the request's URL before its filters and endpoint
//! see it (`rewrite`: the Gateway API's URLRewrite, APISIX's
//! `proxy-rewrite`), and the prefix replacement a redirect shares.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The URL the route's filters and endpoint see: the path replaced whole
/// or by its prefix (the query kept), the host replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewrite {
    /// The whole path replaced (`/v2/items`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A leading prefix replaced, whole segments only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<ReplacePrefix>,
    /// The host the endpoint sees (`Host`, `:authority` in HTTP/2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `/api/items` with `{from: /api, to: /v2}` is `/v2/items`; `/api` is
/// `/v2`; `/apix` is not changed (a prefix is whole segments); `to: /`
/// makes `/api/items` `/items`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplacePrefix {
    pub from: String,
    pub to: String,
}

impl ReplacePrefix {
    /// `path` with the prefix replaced, or None when it does not begin
    /// with the prefix's segments.
    pub fn apply(&self, path: &str) -> Option<String> {
        let from = self.from.trim_end_matches('/');
        let rest = path.strip_prefix(from)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let to = self.to.trim_end_matches('/');
        Some(match (to.is_empty(), rest.is_empty()) {
            (true, true) => "/".to_string(),
            (true, false) => rest.to_string(),
            (false, _) => format!("{to}{rest}"),
        })
    }

    pub(crate) fn check(&self, at: &str, problem: &mut dyn FnMut(String, String)) {
        for (field, value) in [("from", &self.from), ("to", &self.to)] {
            if !value.starts_with('/') {
                problem(format!("{at}.{field}"), "must begin with /".into());
            }
        }
    }
}

impl Rewrite {
    pub(crate) fn check(&self, at: &str, problem: &mut dyn FnMut(String, String)) {
        if self.path.is_some() && self.replace_prefix.is_some() {
            problem(
                at.to_string(),
                "give path or replace_prefix, not both".into(),
            );
        }
        if let Some(path) = &self.path {
            if !path.starts_with('/') || http::uri::PathAndQuery::try_from(path.as_str()).is_err() {
                problem(
                    format!("{at}.path"),
                    format!("`{path}` is not a path beginning with /"),
                );
            }
        }
        if let Some(prefix) = &self.replace_prefix {
            prefix.check(&format!("{at}.replace_prefix"), problem);
        }
        if let Some(host) = &self.host {
            if http::uri::Authority::try_from(host.as_str()).is_err() || host.contains('@') {
                problem(format!("{at}.host"), format!("`{host}` is not a host"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_replaced_by_whole_segments() {
        let p = |from: &str, to: &str| ReplacePrefix {
            from: from.into(),
            to: to.into(),
        };
        assert_eq!(
            p("/api", "/v2").apply("/api/items").as_deref(),
            Some("/v2/items")
        );
        assert_eq!(p("/api/", "/v2").apply("/api").as_deref(), Some("/v2"));
        assert_eq!(p("/api", "/v2").apply("/apix"), None);
        assert_eq!(
            p("/api", "/").apply("/api/items").as_deref(),
            Some("/items")
        );
        assert_eq!(p("/api", "/").apply("/api").as_deref(), Some("/"));
        assert_eq!(p("/", "/v2").apply("/items").as_deref(), Some("/v2/items"));
    }
}
