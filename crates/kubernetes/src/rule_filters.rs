//! A rule's filters that change what its routes do, as the gateway's own:
//! redirects, URL rewrites (and their prefix replacements), request
//! mirrors, and request and response header changes. (`CORS` is
//! `route_view::cors`; `ExtensionRef`s are plugin chains: `plugins.rs`.)

use wasmgate_config::{HeaderEdits, MirrorConfig, Redirect, ReplacePrefix, Rewrite};

use crate::backends::backend;
use crate::model::{Condition, Snapshot, Translation};
use crate::names::entry_name;
use crate::place::Place;
use crate::route_view::{BackendRef, RouteView, RuleView};

/// A rule's RequestRedirect filter as the gateway's redirect, for a match
/// whose prefix is `prefix` (what ReplacePrefixMatch replaces).
pub(crate) fn redirect(rule: &RuleView, prefix: Option<&str>) -> Option<Redirect> {
    let filter = (rule.filters.iter()).find(|f| f["type"] == "RequestRedirect")?;
    let r = &filter["requestRedirect"];
    Some(Redirect {
        scheme: r["scheme"].as_str().map(str::to_string),
        host: r["hostname"].as_str().map(str::to_string),
        port: r["port"].as_u64().and_then(|p| u16::try_from(p).ok()),
        path: r["path"]["replaceFullPath"].as_str().map(str::to_string),
        replace_prefix: replace_prefix(&r["path"], prefix),
        // The Gateway API's default is 302.
        status: r["statusCode"].as_u64().map_or(302, |c| c as u16),
    })
}

/// A rule's URLRewrite filter as the route's rewrite.
pub(crate) fn rewrite(rule: &RuleView, prefix: Option<&str>) -> Option<Rewrite> {
    let filter = (rule.filters.iter()).find(|f| f["type"] == "URLRewrite")?;
    let r = &filter["urlRewrite"];
    Some(Rewrite {
        path: r["path"]["replaceFullPath"].as_str().map(str::to_string),
        replace_prefix: replace_prefix(&r["path"], prefix),
        host: r["hostname"].as_str().map(str::to_string),
    })
}

/// A rule's RequestMirror filters as mirrors, each to an upstream of its
/// own (`<rule>.mirror<n>`); one whose backend does not resolve is left
/// out and said in `problem`.
pub(crate) fn mirrors(
    route: &RouteView,
    rule: &RuleView,
    base: &str,
    place: &Place,
    snapshot: &Snapshot,
    out: &mut Translation,
    problem: &mut Option<Condition>,
) -> Vec<MirrorConfig> {
    let mut found = Vec::new();
    let filters = (rule.filters.iter()).filter(|f| f["type"] == "RequestMirror");
    for (n, filter) in filters.enumerate() {
        let m = &filter["requestMirror"];
        let target = &m["backendRef"];
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let backend_ref = BackendRef {
            group: text(&target["group"]),
            kind: text(&target["kind"]),
            name: text(&target["name"]).unwrap_or_default(),
            namespace: text(&target["namespace"]),
            port: target["port"].as_i64().and_then(|p| i32::try_from(p).ok()),
            weight: None,
        };
        // `percent`, or `fraction` (numerator / denominator, default 100).
        let percent = match (m["percent"].as_u64(), m["fraction"]["numerator"].as_u64()) {
            (Some(p), _) => p,
            (None, Some(numerator)) => {
                let denominator = m["fraction"]["denominator"].as_u64().unwrap_or(100).max(1);
                (numerator * 100).div_ceil(denominator)
            }
            (None, None) => 100,
        };
        if percent == 0 {
            continue;
        }
        let resolved = backend(
            route.kind,
            &[backend_ref],
            &route.namespace,
            snapshot,
            place.tls,
        );
        match resolved {
            Ok(b) if b.nodes.is_empty() => {}
            Ok(b) => {
                let name = entry_name(&format!("{base}.mirror{n}"));
                // A mirror whose TLS cannot be used is left out: it never
                // changes what the original gets.
                let Ok(upstream) = b.upstream(name.clone()) else {
                    continue;
                };
                out.upstreams.push(upstream);
                found.push(MirrorConfig {
                    upstream: name,
                    percent: percent.min(100) as u32,
                });
            }
            Err(condition) => {
                problem.get_or_insert(condition);
            }
        }
    }
    found
}

/// A `ReplacePrefixMatch` path modifier: the match's prefix replaced.
fn replace_prefix(path: &serde_json::Value, prefix: Option<&str>) -> Option<ReplacePrefix> {
    let to = path["replacePrefixMatch"].as_str()?;
    Some(ReplacePrefix {
        from: prefix?.to_string(),
        to: to.to_string(),
    })
}

/// A rule's `RequestHeaderModifier` or `ResponseHeaderModifier` (`field`)
/// as the route's header changes.
pub(crate) fn header_edits(rule: &RuleView, field: &str) -> HeaderEdits {
    let mut edits = HeaderEdits::default();
    for filter in &rule.filters {
        let m = &filter[field];
        let pairs = |list: &serde_json::Value| -> Vec<(String, String)> {
            (list.as_array().into_iter().flatten())
                .filter_map(|h| {
                    let name = h["name"].as_str()?.to_ascii_lowercase();
                    Some((name, h["value"].as_str()?.to_string()))
                })
                .collect()
        };
        edits.set.extend(pairs(&m["set"]));
        edits.add.extend(pairs(&m["add"]));
        let removed = (m["remove"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str().map(str::to_ascii_lowercase));
        edits.remove.extend(removed);
    }
    edits
}
