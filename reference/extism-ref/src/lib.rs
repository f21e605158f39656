//! Shared pieces of the reference tools: loading a plugin the way the tests
//! and benchmarks describe it.

use extism::{Manifest, Plugin, PluginBuilder, Wasm, PTR};

/// A manifest for a .wasm path or a manifest .json file.
pub fn manifest_for(path: &str) -> Manifest {
    if path.ends_with(".json") {
        let text = std::fs::read_to_string(path).expect("reading manifest");
        let mut manifest: Manifest = serde_json::from_str(&text).expect("parsing manifest");
        let base = std::path::Path::new(path).parent().unwrap().to_path_buf();
        for wasm in manifest.wasm.iter_mut() {
            if let Wasm::File { path, .. } = wasm {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
        }
        manifest
    } else {
        Manifest::new([Wasm::file(path)])
    }
}

pub fn imports_wasi(manifest: &Manifest) -> bool {
    manifest.wasm.iter().any(|w| match w {
        Wasm::File { path, .. } => std::fs::read(path)
            .map(|b| b.windows(22).any(|x| x == b"wasi_snapshot_preview1"))
            .unwrap_or(false),
        _ => false,
    })
}

pub fn build(manifest: Manifest, with_reflect: bool) -> Result<Plugin, extism::Error> {
    let wasi = imports_wasi(&manifest);
    let mut builder = PluginBuilder::new(manifest)
        .with_wasi(wasi)
        .with_http_response_headers(true);
    // `reflect` in `extism:host/user`: returns its input block unchanged.
    if with_reflect {
        builder = builder.with_function_in_namespace(
            "extism:host/user",
            "reflect",
            [PTR],
            [PTR],
            extism::UserData::new(()),
            |plugin, inputs, outputs, _| {
                let input: Vec<u8> = plugin.memory_get_val(&inputs[0])?;
                plugin.memory_set_val(&mut outputs[0], input)?;
                Ok(())
            },
        );
    }
    builder.build()
}
