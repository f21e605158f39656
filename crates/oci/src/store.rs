//! What was pulled, kept on this node so that a load needs the registry
//! only for what it does not have. Everything is named by its digest and
//! checked against it when read (a corrupt or planted file is pulled again,
//! not used), except the one thing a digest cannot name: which digest a tag
//! pointed to when it was last pulled (`pull: if_not_present`).
//!
//! ```text
//! <root>/oci/manifests/<hex>        manifests and indexes, as fetched
//! <root>/oci/layers/<hex>           image layers (tars holding plugin.wasm)
//! <root>/oci/tags/<sha256 of registry/repository:tag>   "sha256:<hex>"
//! <root>/plugins/<hex>.wasm         modules, named by their SHA-256 (the
//!                                   files URL fetches keep too)
//! ```
//!
//! `<root>` is the compile cache's directory, which wasmgate keeps private
//! to its user (0700); without one, a private directory of this process.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::reference::{digest_hex, OciReference};

pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(root: PathBuf) -> Store {
        Store { root }
    }

    /// A manifest by its digest, if kept and intact.
    pub fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        read_verified(&self.manifest_path(digest).ok()?, digest)
    }

    pub fn keep_manifest(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        write(&self.manifest_path(digest)?, bytes)
    }

    /// An image layer by its digest, if kept and intact.
    pub fn layer(&self, digest: &str) -> Option<Vec<u8>> {
        read_verified(&self.layer_path(digest).ok()?, digest)
    }

    pub fn keep_layer(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        write(&self.layer_path(digest)?, bytes)
    }

    /// The file of the module with SHA-256 `hex`, if kept and intact.
    pub fn module_file(&self, hex: &str) -> Option<PathBuf> {
        let path = self.module_path(hex);
        read_verified(&path, &format!("sha256:{hex}")).map(|_| path)
    }

    /// Keeps `module`; returns its file and SHA-256 (hex).
    pub fn keep_module(&self, module: &[u8]) -> Result<(PathBuf, String)> {
        let hex = hex::encode(Sha256::digest(module));
        let path = self.module_path(&hex);
        if read_verified(&path, &format!("sha256:{hex}")).is_none() {
            write(&path, module)?;
        }
        Ok((path, hex))
    }

    /// The digest `reference`'s tag pointed to when last pulled.
    pub fn tag(&self, reference: &OciReference) -> Option<String> {
        let text = std::fs::read_to_string(self.tag_path(reference)?).ok()?;
        let digest = text.trim().to_string();
        digest_hex(&digest).ok()?;
        Some(digest)
    }

    pub fn keep_tag(&self, reference: &OciReference, digest: &str) -> Result<()> {
        match self.tag_path(reference) {
            Some(path) => write(&path, digest.as_bytes()),
            None => Ok(()),
        }
    }

    fn manifest_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("oci/manifests").join(digest_hex(digest)?))
    }

    fn layer_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("oci/layers").join(digest_hex(digest)?))
    }

    fn module_path(&self, hex: &str) -> PathBuf {
        self.root.join("plugins").join(format!("{hex}.wasm"))
    }

    fn tag_path(&self, reference: &OciReference) -> Option<PathBuf> {
        let key = reference.tag_key()?;
        Some(
            self.root
                .join("oci/tags")
                .join(hex::encode(Sha256::digest(key.as_bytes()))),
        )
    }
}

/// The file's bytes if their SHA-256 is `digest`.
fn read_verified(path: &Path, digest: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let expected = digest_hex(digest).ok()?;
    (hex::encode(Sha256::digest(&bytes)).eq_ignore_ascii_case(expected)).then_some(bytes)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("store paths have a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    wasmgate_base::fs::write_atomically(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_is_read_back_only_while_intact() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        let manifest = br#"{"schemaVersion":2}"#;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(manifest)));
        assert!(store.manifest(&digest).is_none());
        store.keep_manifest(&digest, manifest).unwrap();
        assert_eq!(store.manifest(&digest).unwrap(), manifest);
        // A file changed after it was kept is not used.
        std::fs::write(store.manifest_path(&digest).unwrap(), b"{}").unwrap();
        assert!(store.manifest(&digest).is_none());

        let (file, hex) = store.keep_module(b"\0asm\x01\0\0\0").unwrap();
        assert_eq!(store.module_file(&hex), Some(file.clone()));
        std::fs::write(&file, b"\0asm\x01\0\0\0planted").unwrap();
        assert_eq!(store.module_file(&hex), None);

        let tagged = OciReference::parse("oci://127.0.0.1:5000/p/auth:1.0").unwrap();
        assert_eq!(store.tag(&tagged), None);
        store.keep_tag(&tagged, &digest).unwrap();
        assert_eq!(store.tag(&tagged), Some(digest));
    }
}
