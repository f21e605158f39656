//! The Extism manifest, accepted as the official SDKs write it.
//!
//! Unknown fields are rejected with their path (`memory.max_pagez`), because a
//! misspelt limit that is silently ignored is a limit that is not enforced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use wasmgate_runtime::wasmtime::Module;
use wasmgate_runtime::{PrecompiledPolicy, Runtime};

/// A manifest as written in JSON.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub wasm: Vec<WasmSource>,
    #[serde(default)]
    pub memory: MemoryOptions,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Host globs outbound HTTP may reach; absent means none.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// Host directory (optionally `ro:`-prefixed) -> guest path.
    #[serde(default)]
    pub allowed_paths: Option<BTreeMap<String, PathBuf>>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryOptions {
    /// Linear memory cap, in 64 KiB pages.
    #[serde(default)]
    pub max_pages: Option<u32>,
    /// Largest HTTP response body a plugin may receive (default 50 MiB).
    #[serde(default)]
    pub max_http_response_bytes: Option<u64>,
    /// Largest total size of a plugin's vars (default 1 MiB; 0 disables vars).
    #[serde(default)]
    pub max_var_bytes: Option<u64>,
}

/// One module of the manifest: from a file or inline data. URLs are refused:
/// a server should not fetch code at start-up from wherever a file points.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmSource {
    #[serde(default)]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub data: Option<WasmData>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub method: Option<String>,
    /// Module name other modules import it by; the main module is `main` (or unnamed).
    #[serde(default)]
    pub name: Option<String>,
    /// Expected SHA-256 (hex) of the module bytes.
    #[serde(default)]
    pub hash: Option<String>,
}

/// Inline module bytes: a base64 string, or an array of byte values.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum WasmData {
    Base64(String),
    Bytes(Vec<u8>),
}

/// A module ready to compile.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    pub name: String,
    pub module: Module,
    /// Where it came from, for messages.
    pub origin: String,
}

pub const MAIN_MODULE: &str = "main";

impl Manifest {
    /// A manifest holding one module read from `path`.
    pub fn from_wasm_file(path: impl Into<PathBuf>) -> Manifest {
        Manifest {
            wasm: vec![WasmSource {
                path: Some(path.into()),
                ..WasmSource::default()
            }],
            ..Manifest::default()
        }
    }

    /// Parses manifest JSON; errors name the offending field.
    pub fn from_json(text: &str) -> Result<Manifest> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            anyhow::anyhow!("invalid manifest at `{path}`: {}", e.into_inner())
        })
    }

    /// Reads a manifest file; relative module paths resolve against its directory.
    pub fn from_file(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading manifest {}", path.display()))?;
        let mut manifest =
            Manifest::from_json(&text).with_context(|| format!("in {}", path.display()))?;
        let base = wasmgate_base::paths::config_dir(path);
        for wasm in &mut manifest.wasm {
            if let Some(p) = &wasm.path {
                wasm.path = Some(wasmgate_base::paths::resolve(base, p));
            }
        }
        Ok(manifest)
    }

    /// Loads every module with `runtime`, checks hashes, and names them;
    /// exactly one is `main`.
    /// Loads every module; `path` modules may be precompiled artifacts when
    /// `precompiled` allows it, inline `data` never.
    pub fn load_modules(
        &self,
        runtime: &Runtime,
        precompiled: PrecompiledPolicy,
    ) -> Result<Vec<LoadedModule>> {
        if self.wasm.is_empty() {
            bail!("the manifest lists no wasm modules");
        }
        let mut modules: Vec<LoadedModule> = Vec::with_capacity(self.wasm.len());
        for (i, source) in self.wasm.iter().enumerate() {
            let origin = source.origin();
            // A file's errors name the file already; a lone file needs no index.
            let label = match (&source.path, self.wasm.len()) {
                (Some(_), 1) => None,
                (Some(_), _) => Some(format!("wasm[{i}]")),
                (None, _) => Some(format!("wasm[{i}] ({origin})")),
            };
            let (module, hash) = match (source.load(runtime, precompiled), label) {
                (Ok(loaded), _) => loaded,
                (Err(e), Some(label)) => return Err(e.context(label)),
                (Err(e), None) => return Err(e),
            };
            if let Some(expected) = &source.hash {
                let actual = hex::encode(hash);
                if !actual.eq_ignore_ascii_case(expected) {
                    bail!("wasm[{i}] ({origin}): hash mismatch: the manifest expects {expected}, the module's SHA-256 is {actual}");
                }
            }
            let name = source
                .name
                .clone()
                .unwrap_or_else(|| MAIN_MODULE.to_string());
            if modules.iter().any(|m| m.name == name) {
                bail!("wasm[{i}] ({origin}): two modules are named `{name}`; give each a distinct `name` (the entry point is `main` or unnamed)");
            }
            modules.push(LoadedModule {
                name,
                module,
                origin,
            });
        }
        if !modules.iter().any(|m| m.name == MAIN_MODULE) {
            bail!("no main module: name one module `main` or leave its name out");
        }
        Ok(modules)
    }

    /// Linear-memory cap in bytes, if any.
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        self.memory.max_pages.map(|p| u64::from(p) * 65536)
    }
}

impl WasmSource {
    /// The compiled module and the SHA-256 of its bytes.
    fn load(
        &self,
        runtime: &Runtime,
        precompiled: PrecompiledPolicy,
    ) -> Result<(Module, [u8; 32])> {
        let bytes = match (&self.path, &self.data, &self.url) {
            (Some(path), None, None) => return runtime.load_module_file(path, precompiled),
            (None, Some(WasmData::Bytes(b)), None) => b.clone(),
            (None, Some(WasmData::Base64(s)), None) => base64::engine::general_purpose::STANDARD
                .decode(s.trim())
                .context("`data` is not valid base64")?,
            (None, None, Some(url)) => bail!(
                "`url` modules are not fetched by wasmgate ({url}); download the module and use `path`"
            ),
            _ => bail!("each wasm entry needs exactly one of `path`, `data` or `url`"),
        };
        let hash = Sha256::digest(&bytes).into();
        Ok((runtime.load_module(&bytes)?, hash))
    }

    /// Where the module comes from, for messages.
    fn origin(&self) -> String {
        match (&self.path, &self.url) {
            (Some(path), _) => path.display().to_string(),
            (None, Some(url)) => url.clone(),
            (None, None) => "inline data".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgate_runtime::RuntimeConfig;

    fn runtime() -> Runtime {
        Runtime::new(RuntimeConfig {
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn parses_the_official_shape() {
        let m = Manifest::from_json(
            r#"{"wasm":[{"path":"a.wasm","name":"main","hash":"00"}],
                "memory":{"max_pages":16,"max_http_response_bytes":1024,"max_var_bytes":10},
                "config":{"k":"v"},"allowed_hosts":["*.example.com"],
                "allowed_paths":{"ro:/tmp":"/data"},"timeout_ms":250}"#,
        )
        .unwrap();
        assert_eq!(m.memory.max_pages, Some(16));
        assert_eq!(m.memory_limit_bytes(), Some(16 * 65536));
        assert_eq!(m.config["k"], "v");
        assert_eq!(m.timeout_ms, Some(250));
        assert_eq!(m.allowed_paths.unwrap()["ro:/tmp"], PathBuf::from("/data"));
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = Manifest::from_json(r#"{"wasm":[],"memory":{"max_pagez":1}}"#).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("memory"), "{msg}");
        assert!(msg.contains("max_pagez"), "{msg}");
        let err = Manifest::from_json(r#"{"wasm":[{"path":"x","sha":"1"}]}"#).unwrap_err();
        assert!(format!("{err:#}").contains("sha"));
    }

    #[test]
    fn inline_data_and_hash_check() {
        let wasm = b"\0asm\x01\0\0\0".to_vec();
        let hash = hex::encode(Sha256::digest(&wasm));
        let b64 = base64::engine::general_purpose::STANDARD.encode(&wasm);
        let m = Manifest::from_json(&format!(
            r#"{{"wasm":[{{"data":"{b64}","hash":"{hash}"}}]}}"#
        ))
        .unwrap();
        let runtime = runtime();
        let modules = m
            .load_modules(&runtime, PrecompiledPolicy::Refused)
            .unwrap();
        assert_eq!(modules[0].name, "main");
        assert_eq!(modules[0].origin, "inline data");

        let bad = Manifest::from_json(&format!(
            r#"{{"wasm":[{{"data":"{b64}","hash":"{}"}}]}}"#,
            "ab".repeat(32)
        ))
        .unwrap();
        let err = format!(
            "{:#}",
            bad.load_modules(&runtime, PrecompiledPolicy::Refused)
                .unwrap_err()
        );
        assert!(err.contains("hash mismatch"), "{err}");
    }

    #[test]
    fn a_file_module_is_checked_against_its_hash() {
        let runtime = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.wasm");
        let wasm = b"\0asm\x01\0\0\0";
        std::fs::write(&path, wasm).unwrap();
        let hash = hex::encode(Sha256::digest(wasm));
        let manifest = |hash: &str| {
            Manifest::from_json(&format!(
                r#"{{"wasm":[{{"path":"{}","hash":"{hash}"}}]}}"#,
                path.display()
            ))
            .unwrap()
        };
        let modules = manifest(&hash)
            .load_modules(&runtime, PrecompiledPolicy::Refused)
            .unwrap();
        assert_eq!(modules[0].origin, path.display().to_string());
        let err = format!(
            "{:#}",
            manifest(&"cd".repeat(32))
                .load_modules(&runtime, PrecompiledPolicy::Refused)
                .unwrap_err()
        );
        assert!(
            err.contains("hash mismatch") && err.contains(&hash),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
        let err = format!(
            "{:#}",
            manifest(&hash)
                .load_modules(&runtime, PrecompiledPolicy::Refused)
                .unwrap_err()
        );
        assert!(
            err.starts_with(&format!("cannot read {}", path.display())),
            "{err}"
        );
    }

    #[test]
    fn module_naming_rules() {
        let runtime = runtime();
        let no_main =
            Manifest::from_json(r#"{"wasm":[{"data":[0,97,115,109,1,0,0,0],"name":"lib"}]}"#)
                .unwrap();
        assert!(format!(
            "{:#}",
            no_main
                .load_modules(&runtime, PrecompiledPolicy::Refused)
                .unwrap_err()
        )
        .contains("no main module"));
        let url = Manifest::from_json(r#"{"wasm":[{"url":"https://x/y.wasm"}]}"#).unwrap();
        assert!(format!(
            "{:#}",
            url.load_modules(&runtime, PrecompiledPolicy::Refused)
                .unwrap_err()
        )
        .contains("not fetched"));
        let empty = Manifest::from_json(r#"{"wasm":[]}"#).unwrap();
        assert!(empty
            .load_modules(&runtime, PrecompiledPolicy::Refused)
            .is_err());
    }
}
