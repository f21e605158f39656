//! Every endpoint of the admin listener, in one table. The router serves
//! what the table names and nothing else; a unit test holds the table equal
//! to `docs/admin-openapi.yaml` (served at `/openapi.yaml`), and the safety
//! tests (crates/cli/tests/e2e/admin_safety.rs) drive every endpoint that
//! document lists through the access checks. So an endpoint cannot be added
//! without being documented, nor documented without being checked.
//!
//! A path parameter (`{name}`) matches one segment, percent-decoded: the
//! dashboard encodes names (`a%20b`), as any client should.

use hyper::Method;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/healthz`, `/readyz`: no checks at all (orchestrators' probes).
    Healthz,
    Readyz,
    /// The dashboard's page and assets: the Host and Origin checks, no token.
    Dashboard,
    Metrics,
    Status,
    StatsHistory,
    /// The last requests, from the access log.
    Requests,
    /// The whole error a client was answered with, by its request id.
    ErrorDetail,
    OpenApi,
    Reload,
    Profile,
    Cluster,
    Config,
    PluginStatus,
    List(Section),
    Get(Section),
    Put(Section),
    Delete(Section),
}

/// A named list of the configuration the admin API reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    Routes,
    Upstreams,
    Plugins,
    Services,
    Certificates,
}

impl Endpoint {
    /// Probes answer without any check: they reveal nothing.
    pub(crate) fn is_probe(self) -> bool {
        matches!(self, Endpoint::Healthz | Endpoint::Readyz)
    }
}

use Endpoint::*;
use Section::*;

/// (method, path as the OpenAPI document writes it, endpoint).
pub(crate) const TABLE: &[(Method, &str, Endpoint)] = &[
    (Method::GET, "/healthz", Healthz),
    (Method::GET, "/readyz", Readyz),
    (Method::GET, "/", Dashboard),
    (Method::GET, "/index.html", Dashboard),
    (Method::GET, "/ui/app.js", Dashboard),
    (Method::GET, "/ui/app.css", Dashboard),
    (Method::GET, "/metrics", Metrics),
    (Method::GET, "/status", Status),
    (Method::GET, "/stats/history", StatsHistory),
    (Method::GET, "/requests", Requests),
    (Method::GET, "/errors/{name}", ErrorDetail),
    (Method::GET, "/openapi.yaml", OpenApi),
    (Method::POST, "/reload", Reload),
    (Method::POST, "/profile", Profile),
    (Method::GET, "/cluster", Cluster),
    (Method::GET, "/config", Config),
    (Method::GET, "/plugins/{name}/status", PluginStatus),
    (Method::GET, "/routes", List(Routes)),
    (Method::GET, "/routes/{name}", Get(Routes)),
    (Method::PUT, "/routes/{name}", Put(Routes)),
    (Method::DELETE, "/routes/{name}", Delete(Routes)),
    (Method::GET, "/upstreams", List(Upstreams)),
    (Method::GET, "/upstreams/{name}", Get(Upstreams)),
    (Method::PUT, "/upstreams/{name}", Put(Upstreams)),
    (Method::DELETE, "/upstreams/{name}", Delete(Upstreams)),
    (Method::GET, "/plugins", List(Plugins)),
    (Method::GET, "/plugins/{name}", Get(Plugins)),
    (Method::PUT, "/plugins/{name}", Put(Plugins)),
    (Method::DELETE, "/plugins/{name}", Delete(Plugins)),
    (Method::GET, "/services", List(Services)),
    (Method::GET, "/services/{name}", Get(Services)),
    (Method::PUT, "/services/{name}", Put(Services)),
    (Method::DELETE, "/services/{name}", Delete(Services)),
    (Method::GET, "/certificates", List(Certificates)),
    (Method::GET, "/certificates/{name}", Get(Certificates)),
    (Method::PUT, "/certificates/{name}", Put(Certificates)),
    (Method::DELETE, "/certificates/{name}", Delete(Certificates)),
];

/// What the table says about a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The endpoint, and the path's `{name}` (decoded) if it has one.
    Endpoint(Endpoint, Option<String>),
    /// The path exists, not with this method: these are allowed.
    WrongMethod(Vec<Method>),
    NotFound,
}

/// Looks `method` and `path` up in the table.
pub(crate) fn find(method: &Method, path: &str) -> Lookup {
    let mut allowed = Vec::new();
    for (m, template, endpoint) in TABLE {
        let Some(name) = matches(template, path) else {
            continue;
        };
        if m == method {
            return Lookup::Endpoint(*endpoint, name);
        }
        allowed.push(m.clone());
    }
    if allowed.is_empty() {
        Lookup::NotFound
    } else {
        Lookup::WrongMethod(allowed)
    }
}

/// Whether `path` matches `template`: `Some` with the decoded `{name}`
/// segment (`Some(None)` for a template without one).
fn matches(template: &str, path: &str) -> Option<Option<String>> {
    if template == "/" {
        return (path == "/").then_some(None);
    }
    let mut parts = template.trim_start_matches('/').split('/');
    let mut segments = path.trim_start_matches('/').split('/');
    let mut name = None;
    loop {
        match (parts.next(), segments.next()) {
            (None, None) => return Some(name),
            (Some("{name}"), Some(segment)) if !segment.is_empty() => {
                name = Some(decode(segment)?);
            }
            (Some(part), Some(segment)) if part == segment => {}
            _ => return None,
        }
    }
}

/// A percent-decoded path segment; `None` when it is not UTF-8.
fn decode(segment: &str) -> Option<String> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_find_their_endpoints_with_decoded_names() {
        assert_eq!(
            find(&Method::PUT, "/routes/a%20b"),
            Lookup::Endpoint(Put(Routes), Some("a b".into()))
        );
        assert_eq!(
            find(&Method::GET, "/plugins/%22%3E%3Cx%3E/status"),
            Lookup::Endpoint(PluginStatus, Some("\"><x>".into()))
        );
        assert_eq!(find(&Method::GET, "/"), Lookup::Endpoint(Dashboard, None));
        assert_eq!(
            find(&Method::GET, "/reload"),
            Lookup::WrongMethod(vec![Method::POST])
        );
        assert_eq!(find(&Method::GET, "/routes/"), Lookup::NotFound);
        assert_eq!(find(&Method::GET, "/routes/a/b"), Lookup::NotFound);
        assert_eq!(find(&Method::GET, "/nowhere"), Lookup::NotFound);
    }

    /// The table and the OpenAPI document list the same paths and methods.
    #[test]
    fn the_table_is_the_openapi_document() {
        let document: serde_json::Value =
            serde_yaml_ng::from_str(super::super::OPENAPI).expect("the OpenAPI document parses");
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for method in ["get", "put", "post", "delete", "patch"] {
                if item.get(method).is_some() {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        let mut served: Vec<(String, String)> = TABLE
            .iter()
            .map(|(m, p, _)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(
            served, documented,
            "crates/admin/src/endpoints.rs and docs/admin-openapi.yaml must list the same endpoints"
        );
    }
}
