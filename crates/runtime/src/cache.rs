//! Precompiled modules cached on disk.
//!
//! An entry is named by the SHA-256 of the wasm and a hash of the engine's
//! compatibility settings (wasmtime version, target, compiler flags), so a
//! changed module or a changed engine never picks up a stale entry. Entries are
//! written to a temporary file and renamed into place, so readers never see a
//! half-written file, and each carries a checksum of its payload that is checked
//! before wasmtime is asked to load it: a corrupt or truncated entry is
//! recompiled and replaced, never executed.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

const MAGIC: &[u8; 8] = b"WGCACHE1";
const HEADER_LEN: usize = MAGIC.len() + 32;

/// A directory of precompiled modules.
#[derive(Clone, Debug)]
pub struct ModuleCache {
    dir: PathBuf,
}

/// What the cache did for one load; useful in logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Miss,
    /// An entry existed but failed verification or loading; it was recompiled.
    Replaced,
}

impl ModuleCache {
    pub fn open(dir: PathBuf) -> Result<ModuleCache> {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the module cache directory {}", dir.display()))?;
        Ok(ModuleCache { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the entry for `wasm` under `engine`.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let content = hex::encode(Sha256::digest(wasm));
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir
            .join(format!("{content}-{:016x}.cwasm", hasher.finish()))
    }

    pub fn load_or_compile(&self, engine: &Engine, wasm: &[u8]) -> Result<Module> {
        self.load_or_compile_traced(engine, wasm).map(|(m, _)| m)
    }

    pub fn load_or_compile_traced(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> Result<(Module, CacheOutcome)> {
        let path = self.entry_path(engine, wasm);
        let mut outcome = CacheOutcome::Miss;
        if let Ok(entry) = std::fs::read(&path) {
            match load_entry(engine, &entry) {
                Ok(module) => return Ok((module, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(entry = %path.display(), error = %e, "discarding unusable cache entry");
                    outcome = CacheOutcome::Replaced;
                }
            }
        }
        let artifact = engine
            .precompile_module(wasm)
            .map_err(|e| anyhow::Error::from(e).context("invalid WebAssembly module"))?;
        // SAFETY: the artifact was produced by this engine a moment ago.
        let module = unsafe { Module::deserialize(engine, &artifact) }
            .map_err(anyhow::Error::from)
            .context("loading a freshly compiled module")?;
        if let Err(e) = self.store_entry(&path, &artifact) {
            // A read-only or full disk costs speed, not correctness.
            tracing::warn!(entry = %path.display(), error = %e, "could not write module cache entry");
        }
        Ok((module, outcome))
    }

    fn store_entry(&self, path: &Path, artifact: &[u8]) -> Result<()> {
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(artifact))?;
        file.write_all(artifact)?;
        file.as_file().sync_data()?;
        file.persist(path)?;
        Ok(())
    }
}

fn load_entry(engine: &Engine, entry: &[u8]) -> Result<Module> {
    anyhow::ensure!(
        entry.len() > HEADER_LEN && entry.starts_with(MAGIC),
        "not a wasmgate cache entry"
    );
    let (checksum, payload) = entry[MAGIC.len()..].split_at(32);
    anyhow::ensure!(
        Sha256::digest(payload).as_slice() == checksum,
        "checksum mismatch (corrupt or truncated entry)"
    );
    // SAFETY: the payload is byte-for-byte what this cache wrote after
    // compiling it (checksum verified), and wasmtime re-checks engine
    // compatibility while loading.
    Ok(unsafe { Module::deserialize(engine, payload) }?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAT: &str = r#"(module (func (export "answer") (result i32) i32.const 42))"#;

    fn engine() -> Engine {
        Engine::default()
    }

    #[test]
    fn miss_then_hit_then_replaces_corrupt_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().to_path_buf()).unwrap();
        let engine = engine();
        let wasm = wat_to_wasm(WAT);

        let (_, first) = cache.load_or_compile_traced(&engine, &wasm).unwrap();
        assert_eq!(first, CacheOutcome::Miss);
        let (module, second) = cache.load_or_compile_traced(&engine, &wasm).unwrap();
        assert_eq!(second, CacheOutcome::Hit);
        assert!(module.get_export("answer").is_some());

        // Flip one byte in the payload: the checksum must catch it.
        let path = cache.entry_path(&engine, &wasm);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, third) = cache.load_or_compile_traced(&engine, &wasm).unwrap();
        assert_eq!(third, CacheOutcome::Replaced);
        let (_, fourth) = cache.load_or_compile_traced(&engine, &wasm).unwrap();
        assert_eq!(fourth, CacheOutcome::Hit);
    }

    #[test]
    fn truncated_entry_is_recompiled() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().to_path_buf()).unwrap();
        let engine = engine();
        let wasm = wat_to_wasm(WAT);
        cache.load_or_compile(&engine, &wasm).unwrap();
        let path = cache.entry_path(&engine, &wasm);
        std::fs::write(&path, &std::fs::read(&path).unwrap()[..20]).unwrap();
        let (_, outcome) = cache.load_or_compile_traced(&engine, &wasm).unwrap();
        assert_eq!(outcome, CacheOutcome::Replaced);
    }

    #[test]
    fn different_modules_get_different_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().to_path_buf()).unwrap();
        let engine = engine();
        let a = cache.entry_path(&engine, &wat_to_wasm(WAT));
        let b = cache.entry_path(&engine, &wat_to_wasm("(module)"));
        assert_ne!(a, b);
    }

    fn wat_to_wasm(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }
}
