//! A route's own header changes (`request_headers`, `response_headers`;
//! the Gateway API's header modifier filters), parsed once when the route
//! is built so a request only applies them.

use hyper::header::{HeaderName, HeaderValue};
use hyper::HeaderMap;
use wasmgate_config::HeaderEdits;

pub struct HeaderEditor {
    remove: Vec<HeaderName>,
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
}

impl HeaderEditor {
    /// None when there is nothing to change (the request path then skips
    /// it); names and values were checked with the configuration.
    pub fn new(edits: &HeaderEdits) -> Option<Box<HeaderEditor>> {
        if edits.is_empty() {
            return None;
        }
        let pairs = |map: &std::collections::BTreeMap<String, String>| {
            (map.iter())
                .filter_map(|(n, v)| {
                    Some((
                        HeaderName::from_bytes(n.as_bytes()).ok()?,
                        HeaderValue::from_str(v).ok()?,
                    ))
                })
                .collect()
        };
        Some(Box::new(HeaderEditor {
            remove: (edits.remove.iter())
                .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
                .collect(),
            set: pairs(&edits.set),
            add: pairs(&edits.add),
        }))
    }

    pub fn apply(&self, headers: &mut HeaderMap) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_then_set_then_add() {
        let edits: HeaderEdits = serde_json::from_value(serde_json::json!({
            "remove": ["x-secret"], "set": {"x-env": "prod"}, "add": {"x-via": "wasmgate"}
        }))
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.append("x-env", HeaderValue::from_static("a"));
        headers.append("x-env", HeaderValue::from_static("b"));
        headers.insert("x-via", HeaderValue::from_static("edge"));
        HeaderEditor::new(&edits).unwrap().apply(&mut headers);
        assert!(headers.get("x-secret").is_none());
        assert_eq!(headers.get_all("x-env").iter().count(), 1);
        assert_eq!(headers["x-env"], "prod");
        assert_eq!(headers.get_all("x-via").iter().count(), 2);
        assert!(HeaderEditor::new(&HeaderEdits::default()).is_none());
    }
}
