//! Reports properties back as response headers, so a test can see what a
//! filter reads with `proxy_get_property`. The plugin configuration is a
//! JSON list of `"dotted.path:type"` entries, type one of `string`, `int`
//! (8-byte little-endian, as Envoy serializes numbers and durations),
//! `bool` (one byte) or `map` (header-map pairs, shown as `name=value`
//! joined by `; `). Each becomes `x-property-<dotted.path>: <value>`, or
//! `<absent>`.
//!
//! An entry written `log:dotted.path:type` is read in `proxy_on_log`
//! instead (what exists only once the stream is over): a request with
//! `x-log-as: <key>` has those values kept in shared data under `<key>`, and
//! a later request with `x-show-logged: <key>` gets them as
//! `x-logged-<dotted.path>` headers.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(PropertiesRoot { wanted: Rc::new(Vec::new()) })
    });
}}

struct Wanted {
    path: String,
    kind: String,
    /// Read in `proxy_on_log` rather than with the response's headers.
    at_log: bool,
}

struct PropertiesRoot {
    wanted: Rc<Vec<Wanted>>,
}

impl Context for PropertiesRoot {}

impl RootContext for PropertiesRoot {
    fn on_configure(&mut self, _: usize) -> bool {
        let conf = self.get_plugin_configuration().unwrap_or_default();
        let Ok(entries) = serde_json::from_slice::<Vec<String>>(&conf) else {
            return false;
        };
        let wanted = entries
            .into_iter()
            .map(|entry| {
                let (at_log, entry) = match entry.strip_prefix("log:") {
                    Some(rest) => (true, rest),
                    None => (false, entry.as_str()),
                };
                let (path, kind) = entry.split_once(':').unwrap_or((entry, "string"));
                Wanted {
                    path: path.to_string(),
                    kind: kind.to_string(),
                    at_log,
                }
            })
            .collect();
        self.wanted = Rc::new(wanted);
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Properties {
            wanted: Rc::clone(&self.wanted),
            log_as: None,
            show: None,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Properties {
    wanted: Rc<Vec<Wanted>>,
    /// `x-log-as` and `x-show-logged` of the request.
    log_as: Option<String>,
    show: Option<String>,
}

impl Properties {
    /// The property as text, by its wanted type.
    fn shown(&self, wanted: &Wanted) -> String {
        let value = self.get_property(wanted.path.split('.').collect());
        match (value, wanted.kind.as_str()) {
            (None, _) => "<absent>".to_string(),
            (Some(v), "int") if v.len() == 8 => {
                i64::from_le_bytes(v.try_into().unwrap()).to_string()
            }
            (Some(v), "bool") if v.len() == 1 => (v[0] != 0).to_string(),
            (Some(v), "string") => String::from_utf8_lossy(&v).into_owned(),
            (Some(v), "map") => pairs(&v)
                .map(|pairs| {
                    let shown: Vec<String> = pairs
                        .iter()
                        .map(|(name, value)| format!("{name}={value}"))
                        .collect();
                    shown.join("; ")
                })
                .unwrap_or_else(|| format!("<{} bytes, not a map>", v.len())),
            (Some(v), kind) => format!("<{} bytes, not {kind}>", v.len()),
        }
    }
}

impl Context for Properties {}

impl HttpContext for Properties {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        self.log_as = self.get_http_request_header("x-log-as");
        self.show = self.get_http_request_header("x-show-logged");
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        // All read before any is set: the headers set here are the
        // response's too (`response.headers`, `response.headers_bytes`).
        let shown: Vec<(String, String)> = self
            .wanted
            .iter()
            .filter(|w| !w.at_log)
            .map(|w| (format!("x-property-{}", w.path), self.shown(w)))
            .collect();
        for (name, value) in shown {
            self.set_http_response_header(&name, Some(&value));
        }
        let logged = match &self.show {
            Some(key) => self.get_shared_data(&format!("logged/{key}")).0,
            None => None,
        };
        let logged: Vec<(String, String)> = logged
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        for (path, shown) in logged {
            self.set_http_response_header(&format!("x-logged-{path}"), Some(&shown));
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        let Some(key) = self.log_as.clone() else {
            return;
        };
        let logged: Vec<(String, String)> = self
            .wanted
            .iter()
            .filter(|w| w.at_log)
            .map(|w| (w.path.clone(), self.shown(w)))
            .collect();
        let bytes = serde_json::to_vec(&logged).unwrap();
        let _ = self.set_shared_data(&format!("logged/{key}"), Some(&bytes), None);
    }
}

/// A serialized header map (count, then each pair's lengths, then each
/// NUL-terminated name and value), or `None` if it is not one.
fn pairs(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let word = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let count = word(0)?;
    let mut at = 4 + count * 8;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (name_len, value_len) = (word(4 + i * 8)?, word(8 + i * 8)?);
        let name = bytes.get(at..at + name_len)?;
        at += name_len + 1;
        let value = bytes.get(at..at + value_len)?;
        at += value_len + 1;
        out.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    Some(out)
}
