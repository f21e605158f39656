//! Precompiled modules and components cached on disk.
//!
//! An entry is named by the SHA-256 of the wasm and a hash of the engine's
//! compatibility settings (wasmtime version, target, compiler flags), so a
//! changed module or a changed engine never picks up a stale entry. Entries are
//! written to a temporary file and renamed into place, so readers never see a
//! half-written file.
//!
//! An entry is native code that wasmtime runs without verifying it, so the
//! cache must only ever load what this host wrote. Each entry carries an
//! HMAC-SHA256 of its payload under a secret kept beside the entries (`key`,
//! 32 random bytes, mode 0600, created with the directory, which is 0700 and
//! must belong to this process's user). An entry planted by anyone who cannot
//! read that secret, a corrupt or truncated one, or one from another host is
//! recompiled and replaced, never executed.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// What the cache holds: core modules (Extism, Proxy-Wasm) and components
/// (`wasi:http`), each compiled by the engine and loaded back from its
/// artifact.
pub trait Compiled: Sized {
    /// What it is, in errors ("module", "component").
    const WHAT: &'static str;

    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>>;

    /// # Safety
    /// `artifact` must be what [`Compiled::precompile`] made on this host
    /// (wasmtime maps it as native code without verifying it).
    #[allow(unsafe_code)]
    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self>;
}

impl Compiled for Module {
    const WHAT: &'static str = "module";

    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_module(wasm)
    }

    #[allow(unsafe_code)]
    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract is this function's.
        unsafe { Module::deserialize(engine, artifact) }
    }
}

impl Compiled for Component {
    const WHAT: &'static str = "component";

    fn precompile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_component(wasm)
    }

    #[allow(unsafe_code)]
    unsafe fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: the caller's contract is this function's.
        unsafe { Component::deserialize(engine, artifact) }
    }
}

const MAGIC: &[u8; 8] = b"WGCACHE2";
const HEADER_LEN: usize = MAGIC.len() + 32;
/// The file beside the entries that holds this host's secret.
const KEY_FILE: &str = "key";

/// A directory of precompiled modules.
#[derive(Clone)]
pub struct ModuleCache {
    dir: PathBuf,
    /// Authenticates entries: only holders of it can write one that loads.
    key: [u8; 32],
}

impl std::fmt::Debug for ModuleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
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
    /// Opens (creating) the cache in `dir`. Fails when the directory or
    /// its secret belongs to another user or the secret is readable by
    /// others: entries there could have been written by someone else.
    pub fn open(dir: PathBuf) -> Result<ModuleCache> {
        let context = || format!("the module cache directory {}", dir.display());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", context()))?;
        let meta = std::fs::metadata(&dir).with_context(context)?;
        let me = current_uid();
        anyhow::ensure!(
            meta.uid() == me,
            "{} belongs to user {}, not to this process's user {me}: its entries may not be ours to trust; choose another --cache-dir",
            context(),
            meta.uid()
        );
        if meta.mode() & 0o077 != 0 {
            // Created by an older wasmgate (or by hand) with the umask's
            // permissions: ours, so made private.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("making {} private", context()))?;
        }
        let key = read_or_create_key(&dir.join(KEY_FILE), me)?;
        Ok(ModuleCache { dir, key })
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

    pub fn load_or_compile<C: Compiled>(&self, engine: &Engine, wasm: &[u8]) -> Result<C> {
        self.load_or_compile_traced(engine, wasm).map(|(m, _)| m)
    }

    pub fn load_or_compile_traced<C: Compiled>(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> Result<(C, CacheOutcome)> {
        let path = self.entry_path(engine, wasm);
        let mut outcome = CacheOutcome::Miss;
        if let Ok(entry) = std::fs::read(&path) {
            match load_entry(engine, &self.key, &entry) {
                Ok(module) => return Ok((module, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(entry = %path.display(), error = %e, "discarding unusable cache entry");
                    outcome = CacheOutcome::Replaced;
                }
            }
        }
        let artifact = C::precompile(engine, wasm).map_err(|e| {
            anyhow::Error::from(e).context(format!("invalid WebAssembly {}", C::WHAT))
        })?;
        // SAFETY: the artifact was produced by this engine a moment ago.
        #[allow(unsafe_code)]
        let module = unsafe { C::deserialize(engine, &artifact) };
        let module = module
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
        file.write_all(&mac(&self.key, artifact))?;
        file.write_all(artifact)?;
        file.as_file().sync_data()?;
        file.persist(path)?;
        Ok(())
    }
}

fn load_entry<C: Compiled>(engine: &Engine, key: &[u8; 32], entry: &[u8]) -> Result<C> {
    anyhow::ensure!(
        entry.len() > HEADER_LEN && entry.starts_with(MAGIC),
        "not a wasmgate cache entry"
    );
    let (tag, payload) = entry[MAGIC.len()..].split_at(32);
    let mut verifier = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    verifier.update(payload);
    verifier
        .verify_slice(tag)
        .map_err(|_| anyhow::anyhow!("not written by this host, or corrupt or truncated"))?;
    // SAFETY: the payload is byte-for-byte what this cache wrote after
    // compiling it (its HMAC, under a secret only this user can read, is
    // verified), and wasmtime re-checks engine compatibility while loading.
    #[allow(unsafe_code)]
    let module = unsafe { C::deserialize(engine, payload) };
    Ok(module?)
}

fn mac(key: &[u8; 32], payload: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(payload);
    mac.finalize().into_bytes().into()
}

fn current_uid() -> u32 {
    // The owner of a file this process creates is its effective user.
    rustix::process::geteuid().as_raw()
}

/// The cache's secret: read when it is ours and private, created (32 random
/// bytes, 0600, without replacing a file another process created at the same
/// moment) when missing.
fn read_or_create_key(path: &Path, me: u32) -> Result<[u8; 32]> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut file) => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key)
                .map_err(|e| anyhow::anyhow!("no randomness for the cache's secret: {e}"))?;
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            return Ok(key);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    }
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        meta.uid() == me && meta.mode() & 0o077 == 0,
        "{} must belong to this process's user and be readable by it alone (mode 0600): with it, anyone could write cache entries this host would run",
        path.display()
    );
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // Another process may be writing it this very moment: wait briefly.
    let bytes = if bytes.len() < 32 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
    } else {
        bytes
    };
    bytes
        .get(..32)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .with_context(|| {
            format!(
                "{} is truncated: delete it (the cache is rebuilt)",
                path.display()
            )
        })
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
        let cache = ModuleCache::open(dir.path().join("cache")).unwrap();
        let engine = engine();
        let wasm = wat_to_wasm(WAT);

        let (_, first) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(first, CacheOutcome::Miss);
        let (module, second) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(second, CacheOutcome::Hit);
        assert!(module.get_export("answer").is_some());

        // Flip one byte in the payload: the checksum must catch it.
        let path = cache.entry_path(&engine, &wasm);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, third) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(third, CacheOutcome::Replaced);
        let (_, fourth) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(fourth, CacheOutcome::Hit);
    }

    /// An entry someone else wrote (a planted file of native code) is not
    /// run: whatever its form, it is recompiled from the wasm and replaced.
    #[test]
    fn a_planted_entry_is_recompiled_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().join("cache")).unwrap();
        let engine = engine();
        let wasm = wat_to_wasm(WAT);
        let planted = engine
            .precompile_module(&wat_to_wasm(
                r#"(module (func (export "planted") (result i32) i32.const 666))"#,
            ))
            .unwrap();
        let path = cache.entry_path(&engine, &wasm);
        // The old format (an unkeyed checksum), and the new one under a key
        // that is not this host's.
        let mut unkeyed = b"WGCACHE1".to_vec();
        unkeyed.extend_from_slice(&Sha256::digest(&planted));
        unkeyed.extend_from_slice(&planted);
        let mut foreign = MAGIC.to_vec();
        foreign.extend_from_slice(&mac(&[7; 32], &planted));
        foreign.extend_from_slice(&planted);
        for entry in [unkeyed, foreign] {
            std::fs::write(&path, entry).unwrap();
            let (module, outcome) = cache
                .load_or_compile_traced::<Module>(&engine, &wasm)
                .unwrap();
            assert_eq!(outcome, CacheOutcome::Replaced);
            assert!(module.get_export("answer").is_some());
            assert!(module.get_export("planted").is_none());
        }
        let (_, outcome) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(outcome, CacheOutcome::Hit);
    }

    /// The directory is private and its secret readable by this user alone;
    /// a directory made public by hand is made private again, and a secret
    /// others can read is refused.
    #[test]
    fn the_directory_and_its_secret_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        let first = ModuleCache::open(path.clone()).unwrap();
        assert_eq!(mode(&path), 0o700);
        assert_eq!(mode(&path.join(KEY_FILE)), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let again = ModuleCache::open(path.clone()).unwrap();
        assert_eq!(mode(&path), 0o700);
        assert_eq!(first.key, again.key);
        std::fs::set_permissions(path.join(KEY_FILE), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let err = format!("{:#}", ModuleCache::open(path).unwrap_err());
        assert!(err.contains("mode 0600"), "{err}");
    }

    #[test]
    fn truncated_entry_is_recompiled() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().join("cache")).unwrap();
        let engine = engine();
        let wasm = wat_to_wasm(WAT);
        cache.load_or_compile::<Module>(&engine, &wasm).unwrap();
        let path = cache.entry_path(&engine, &wasm);
        std::fs::write(&path, &std::fs::read(&path).unwrap()[..20]).unwrap();
        let (_, outcome) = cache
            .load_or_compile_traced::<Module>(&engine, &wasm)
            .unwrap();
        assert_eq!(outcome, CacheOutcome::Replaced);
    }

    #[test]
    fn different_modules_get_different_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(dir.path().join("cache")).unwrap();
        let engine = engine();
        let a = cache.entry_path(&engine, &wat_to_wasm(WAT));
        let b = cache.entry_path(&engine, &wat_to_wasm("(module)"));
        assert_ne!(a, b);
    }

    fn wat_to_wasm(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }
}
