//! Reports properties back as response headers, so a test can see what a
//! filter reads with `proxy_get_property`. The plugin configuration is a
//! JSON list of `"dotted.path:type"` entries, type one of `string`, `int`
//! (8-byte little-endian, as Envoy serializes numbers) or `bool` (one byte).
//! Each becomes `x-property-<dotted.path>: <value>`, or `<absent>`.

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
                let (path, kind) = entry.split_once(':').unwrap_or((&entry, "string"));
                Wanted {
                    path: path.to_string(),
                    kind: kind.to_string(),
                }
            })
            .collect();
        self.wanted = Rc::new(wanted);
        true
    }

    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Properties {
            wanted: Rc::clone(&self.wanted),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Properties {
    wanted: Rc<Vec<Wanted>>,
}

impl Context for Properties {}

impl HttpContext for Properties {
    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        for wanted in self.wanted.iter() {
            let value = self.get_property(wanted.path.split('.').collect());
            let shown = match (value, wanted.kind.as_str()) {
                (None, _) => "<absent>".to_string(),
                (Some(v), "int") if v.len() == 8 => {
                    i64::from_le_bytes(v.try_into().unwrap()).to_string()
                }
                (Some(v), "bool") if v.len() == 1 => (v[0] != 0).to_string(),
                (Some(v), "string") => String::from_utf8_lossy(&v).into_owned(),
                (Some(v), kind) => format!("<{} bytes, not {kind}>", v.len()),
            };
            let name = format!("x-property-{}", wanted.path);
            self.set_http_response_header(&name, Some(&shown));
        }
        Action::Continue
    }
}
