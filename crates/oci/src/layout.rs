//! Where the module is in an image: the two layouts plugins are published
//! in (learned from Istio's `pkg/wasm` image fetcher, which Higress shares,
//! and from the Wasm OCI artifact format `oras push` and wasm-to-oci make).
//!
//! 1. **The module as a layer of its own**: a layer whose media type says
//!    Wasm (`application/vnd.wasm.content.layer.v1+wasm` of the Wasm OCI
//!    artifact, `application/vnd.module.wasm.content.layer.v1+wasm` of
//!    Istio's and Higress's "compat" variant, or plain `application/wasm`).
//!    The layer is the module.
//! 2. **A container image**: its last layer, a (gzipped) tar, holds a file
//!    named `plugin.wasm`. Higress's own plugins are published this way
//!    (with their spec, README and icon as earlier layers of other types).

use std::io::Read;

use anyhow::{bail, ensure, Context, Result};
use oci_client::manifest::{OciDescriptor, OciImageIndex, OciImageManifest};

/// Media types of a layer that is the module itself.
const WASM_LAYER_TYPES: [&str; 3] = [
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
    "application/wasm",
];

/// Media types of an image layer, gzipped or not.
const TAR_GZIP_TYPES: [&str; 2] = [
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];
const TAR_TYPES: [&str; 2] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
];

/// The file an image layer holds the module as.
const MODULE_IN_IMAGE: &str = "plugin.wasm";

/// Media types of manifests a pull accepts.
pub const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// How the chosen layer holds the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// The layer is the module.
    Wasm,
    /// A tar (gzipped or not) with `plugin.wasm` in it.
    Tar { gzip: bool },
}

/// The layer the module is in, and how.
#[derive(Clone, Debug)]
pub struct ModuleLayer {
    pub descriptor: OciDescriptor,
    pub packing: Packing,
}

/// A manifest as fetched: an image's, or an index of several.
pub enum Manifest {
    Image(Box<OciImageManifest>),
    Index(OciImageIndex),
}

impl Manifest {
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        #[derive(serde::Deserialize)]
        struct Kind {
            #[serde(rename = "mediaType")]
            media_type: Option<String>,
            manifests: Option<serde_json::Value>,
        }
        let kind: Kind = serde_json::from_slice(bytes).context("the manifest is not JSON")?;
        let is_index = kind.manifests.is_some()
            || kind
                .media_type
                .as_deref()
                .is_some_and(|t| t.contains("index") || t.contains("manifest.list"));
        Ok(if is_index {
            Manifest::Index(serde_json::from_slice(bytes).context("reading the image index")?)
        } else {
            Manifest::Image(Box::new(
                serde_json::from_slice(bytes).context("reading the image manifest")?,
            ))
        })
    }
}

/// The manifest of an index to follow: its only one, else the one for
/// WebAssembly (`wasip1`/`wasip2`/`wasi` or architecture `wasm`).
pub fn choose_from_index(index: &OciImageIndex) -> Result<String> {
    if let [only] = index.manifests.as_slice() {
        return Ok(only.digest.clone());
    }
    let for_wasm = index.manifests.iter().find(|entry| {
        entry.platform.as_ref().is_some_and(|p| {
            let (os, arch) = (p.os.to_string(), p.architecture.to_string());
            os.starts_with("wasi") || arch == "wasm"
        })
    });
    match for_wasm {
        Some(entry) => Ok(entry.digest.clone()),
        None => bail!(
            "the image index lists {} manifests and none for WebAssembly (platform os `wasip1`/`wasi` or architecture `wasm`)",
            index.manifests.len()
        ),
    }
}

/// The layer of `manifest` that holds the module.
pub fn module_layer(manifest: &OciImageManifest) -> Result<ModuleLayer> {
    let wasm_layers: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| WASM_LAYER_TYPES.contains(&l.media_type.as_str()))
        .collect();
    match wasm_layers.as_slice() {
        [one] => {
            return Ok(ModuleLayer {
                descriptor: (*one).clone(),
                packing: Packing::Wasm,
            })
        }
        [] => {}
        several => bail!(
            "the image has {} Wasm layers; a plugin image has one",
            several.len()
        ),
    }
    if let Some(last) = manifest.layers.last() {
        let media_type = last.media_type.as_str();
        let gzip = TAR_GZIP_TYPES.contains(&media_type);
        if gzip || TAR_TYPES.contains(&media_type) {
            return Ok(ModuleLayer {
                descriptor: last.clone(),
                packing: Packing::Tar { gzip },
            });
        }
    }
    let types: Vec<&str> = manifest
        .layers
        .iter()
        .map(|l| l.media_type.as_str())
        .collect();
    bail!(
        "no layer holds a Wasm module: expected a layer of type {} or an image whose last layer is a tar with `{MODULE_IN_IMAGE}`; the image's layers are [{}]",
        WASM_LAYER_TYPES.join(" / "),
        types.join(", ")
    )
}

/// The module in `layer` (its bytes as pulled), at most `max_bytes` long.
pub fn extract(layer: &[u8], packing: Packing, max_bytes: u64) -> Result<Vec<u8>> {
    let module = match packing {
        Packing::Wasm => layer.to_vec(),
        Packing::Tar { gzip: true } => {
            module_in_tar(flate2::read::GzDecoder::new(layer), max_bytes)?
        }
        Packing::Tar { gzip: false } => module_in_tar(layer, max_bytes)?,
    };
    // wasmtime's precompiled artifacts are ELF objects: native code, which
    // only an operator's own file may hold (docs/admin.md).
    ensure!(
        !module.starts_with(b"\x7fELF"),
        "the layer holds a precompiled module (native code, which runs outside the sandbox's checks); precompiled modules never load from a registry, whatever `allow_precompiled` says: push the .wasm, and each node compiles and caches it"
    );
    ensure!(
        module.starts_with(b"\0asm"),
        "the layer's content is not a Wasm module (it does not begin with `\\0asm`)"
    );
    Ok(module)
}

fn module_in_tar(tar: impl Read, max_bytes: u64) -> Result<Vec<u8>> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().context("reading the layer as a tar")? {
        let entry = entry.context("reading the layer as a tar")?;
        let path = entry.path().context("a tar entry's name")?.into_owned();
        let is_module = entry.header().entry_type().is_file()
            && path.file_name().is_some_and(|n| n == MODULE_IN_IMAGE);
        if !is_module {
            continue;
        }
        // The size a header claims is not trusted: read one byte more
        // than allowed to tell a module that is too large.
        let mut module = Vec::new();
        entry
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut module)
            .with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            module.len() as u64 <= max_bytes,
            "{} is larger than the limit of {max_bytes} bytes",
            path.display()
        );
        return Ok(module);
    }
    bail!("the image's last layer has no `{MODULE_IN_IMAGE}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(media_type: &str) -> OciDescriptor {
        OciDescriptor {
            media_type: media_type.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 8,
            ..Default::default()
        }
    }

    fn manifest(layers: &[&str]) -> OciImageManifest {
        OciImageManifest {
            layers: layers.iter().map(|t| descriptor(t)).collect(),
            ..Default::default()
        }
    }

    fn tar_of(files: &[(&str, &[u8])], gzip: bool) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, *content).unwrap();
        }
        let tar = builder.into_inner().unwrap();
        if !gzip {
            return tar;
        }
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, &tar).unwrap();
        encoder.finish().unwrap()
    }

    const MODULE: &[u8] = b"\0asm\x01\0\0\0";

    #[test]
    fn finds_a_wasm_layer_among_others() {
        let m = manifest(&[
            "application/vnd.module.wasm.spec.v1+yaml",
            "application/vnd.module.wasm.content.layer.v1+wasm",
            "application/vnd.module.wasm.doc.v1+markdown",
        ]);
        let layer = module_layer(&m).unwrap();
        assert_eq!(layer.packing, Packing::Wasm);
        assert_eq!(
            layer.descriptor.media_type,
            "application/vnd.module.wasm.content.layer.v1+wasm"
        );
    }

    #[test]
    fn takes_the_last_tar_layer_of_an_image() {
        let m = manifest(&[
            "application/vnd.module.wasm.doc.v1+markdown",
            "application/vnd.oci.image.layer.v1.tar+gzip",
        ]);
        assert_eq!(
            module_layer(&m).unwrap().packing,
            Packing::Tar { gzip: true }
        );
        let tgz = tar_of(&[("README.md", b"hi"), ("plugin.wasm", MODULE)], true);
        assert_eq!(
            extract(&tgz, Packing::Tar { gzip: true }, 1 << 20).unwrap(),
            MODULE
        );
        let tar = tar_of(&[("./plugin.wasm", MODULE)], false);
        assert_eq!(
            extract(&tar, Packing::Tar { gzip: false }, 1 << 20).unwrap(),
            MODULE
        );
    }

    #[test]
    fn says_what_is_wrong_with_an_image_without_a_module() {
        let m = manifest(&["application/vnd.oci.image.config.v1+json", "text/plain"]);
        let e = module_layer(&m).unwrap_err().to_string();
        assert!(e.contains("text/plain"), "{e}");
        let two = manifest(&["application/wasm", "application/wasm"]);
        assert!(module_layer(&two)
            .unwrap_err()
            .to_string()
            .contains("2 Wasm layers"));

        let tgz = tar_of(&[("other.wasm", MODULE)], true);
        let e = extract(&tgz, Packing::Tar { gzip: true }, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("no `plugin.wasm`"), "{e}");
        let e = extract(b"PK\x03\x04zip", Packing::Wasm, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("not a Wasm module"), "{e}");
        let e = extract(b"not gzip", Packing::Tar { gzip: true }, 1 << 20).unwrap_err();
        assert!(format!("{e:#}").contains("tar"), "{e:#}");
    }

    #[test]
    fn a_module_over_the_limit_is_refused_whatever_its_header_claims() {
        let big = [MODULE, &[0u8; 4096]].concat();
        let tgz = tar_of(&[("plugin.wasm", &big)], true);
        let e = extract(&tgz, Packing::Tar { gzip: true }, 1024).unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
    }

    #[test]
    fn an_index_is_followed_to_its_wasm_manifest() {
        let index: OciImageIndex = serde_json::from_value(serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 1,
                 "digest": format!("sha256:{}", "a".repeat(64)),
                 "platform": {"os": "linux", "architecture": "amd64"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 1,
                 "digest": format!("sha256:{}", "b".repeat(64)),
                 "platform": {"os": "wasip1", "architecture": "wasm"}}
            ]
        }))
        .unwrap();
        assert_eq!(
            choose_from_index(&index).unwrap(),
            format!("sha256:{}", "b".repeat(64))
        );
    }
}
