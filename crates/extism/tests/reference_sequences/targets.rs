//! The two configurations every sequence runs under: one with vars, the
//! config's edge keys and HTTP allowed, one with vars disabled and no
//! HTTP; each as a manifest for wasmgate and as flags for the reference.

use serde_json::Value;

pub(crate) struct Target {
    pub(crate) name: &'static str,
    pub(crate) config: &'static [(&'static str, &'static str)],
    pub(crate) max_var_bytes: u64,
    pub(crate) http: bool,
}

const CONFIG: &[(&str, &str)] = &[
    ("greeting", "hello from the manifest"),
    ("empty", ""),
    ("", "the empty key's value"),
];

pub(crate) const TARGETS: &[Target] = &[
    Target {
        name: "vars",
        config: CONFIG,
        max_var_bytes: 4096,
        http: true,
    },
    Target {
        name: "no-vars",
        config: &[("greeting", "hello from the manifest")],
        max_var_bytes: 0,
        http: false,
    },
];

impl Target {
    pub(crate) fn manifest_json(&self) -> String {
        let config: serde_json::Map<String, Value> = self
            .config
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        let mut manifest = serde_json::json!({
            "config": config,
            "memory": {"max_var_bytes": self.max_var_bytes},
        });
        if self.http {
            manifest["allowed_hosts"] = serde_json::json!(["127.0.0.1"]);
        }
        manifest.to_string()
    }

    pub(crate) fn reference_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for (k, v) in self.config {
            flags.push("--config".into());
            flags.push(format!("{k}={v}"));
        }
        flags.push("--max-var-bytes".into());
        flags.push(self.max_var_bytes.to_string());
        if self.http {
            flags.push("--allow-host".into());
            flags.push("127.0.0.1".into());
        }
        flags
    }

    /// The config value's length for a key, if the key is in the config
    /// with a non-empty value (an empty value comes back as handle 0).
    pub(crate) fn config_len(&self, key: &[u8]) -> Option<u64> {
        self.config
            .iter()
            .find(|(k, _)| k.as_bytes() == key)
            .map(|(_, v)| v.len() as u64)
            .filter(|&n| n > 0)
    }
}
