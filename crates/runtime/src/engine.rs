//! The engine: compiler settings, the instance allocator and the epoch ticker.

use std::collections::HashMap;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use wasmtime::component::Component;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, Module, OptLevel, PoolingAllocationConfig,
    Precompiled as ArtifactKind, WasmBacktraceDetails,
};

use crate::cache::ModuleCache;

mod config;

pub use config::{PrecompiledPolicy, RuntimeConfig};

/// One wasmtime engine plus what every plugin shares: the module cache and the
/// epoch ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    cache: Option<ModuleCache>,
    epoch_tick: Duration,
    pooling: bool,
    /// Modules loaded so far, by SHA-256 of their bytes, with the load
    /// stamp of their last use. Loading the same bytes again returns the
    /// same `Module`: the pooling allocator keeps freed memory slots warm for
    /// the module that used them, so a reload that made a new `Module` for
    /// unchanged bytes would strand those slots (memory grew on every
    /// reload). See [`Runtime::forget_modules_unused_since`].
    loaded: Mutex<HashMap<[u8; 32], (Module, u64)>>,
    load_stamp: AtomicU64,
    /// Hashes of the bytes being loaded right now, and the condition their
    /// loaders signal when done. A gateway loads its plugins in parallel and
    /// several plugins often name one file; without this each of them read,
    /// verified and deserialized it (and later built its memory image) at
    /// the same time: 20 plugins on 4 files did the work of 20
    /// (docs/benchmarks.md, "Scale").
    loading: Mutex<HashSet<[u8; 32]>>,
    load_done: Condvar,
    /// Components loaded so far, as `loaded` keeps modules (and for the
    /// same reason).
    loaded_components: Mutex<HashMap<[u8; 32], (Component, u64)>>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Runtime> {
        let (engine, pooling) = build_engine(&config)?;
        crate::ticker::start(&engine, config.epoch_tick);
        crate::call_clock::calibrate();
        let cache = match &config.cache_dir {
            Some(dir) => Some(ModuleCache::open(dir.clone())?),
            None => None,
        };
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                cache,
                epoch_tick: config.epoch_tick,
                pooling,
                loaded: Mutex::new(HashMap::new()),
                load_stamp: AtomicU64::new(0),
                loading: Mutex::new(HashSet::new()),
                load_done: Condvar::new(),
                loaded_components: Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The compiled-module cache's directory, if there is a cache.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.cache.as_ref().map(|c| c.dir())
    }

    /// Whether the pooling allocator is in use (false after a fallback).
    pub fn pooling(&self) -> bool {
        self.inner.pooling
    }

    /// Period of the epoch ticker.
    pub fn epoch_tick(&self) -> Duration {
        self.inner.epoch_tick
    }

    /// Compile (or load from the cache) a module from wasm or WAT text.
    /// Precompiled artifacts are refused here: these bytes come from no file
    /// an operator named (see [`PrecompiledPolicy`]).
    pub fn load_module(&self, bytes: &[u8]) -> Result<Module> {
        refuse_artifact(
            &bytes[..bytes.len().min(ARTIFACT_MAGIC.len())],
            PrecompiledPolicy::Refused,
        )?;
        self.load_module_keyed(bytes, sha256(bytes))
    }

    /// [`Runtime::load_module`] for a file, also returning the SHA-256 of the
    /// bytes the module came from; a `.cwasm` produced by
    /// [`Runtime::precompile`] loads only when `precompiled` allows it.
    ///
    /// A module loaded before is found by hashing the file in small chunks,
    /// so reloading a configuration whose plugins did not change (megabytes
    /// for a Go plugin) allocates no copy of them. That matters for memory,
    /// not only time: a few MiB freed on every reload leave the allocators'
    /// caches bigger (R5 in docs/reliability.md).
    ///
    /// Errors name the file once. WAT text is parsed here, so that a syntax
    /// error names the file and line rather than `<anon>`.
    pub fn load_module_file(
        &self,
        path: &Path,
        precompiled: PrecompiledPolicy,
    ) -> Result<(Module, [u8; 32])> {
        use sha2::{Digest, Sha256};
        use std::io::Read;
        let cannot_read = |e: std::io::Error| {
            // The repository's examples point at plugins that `make plugins`
            // builds; say so when one is missing.
            let hint = if e.kind() == std::io::ErrorKind::NotFound
                && path.to_string_lossy().contains("target/wasm/")
            {
                " (the bundled plugins are built by `make plugins`)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot read {}: {e}{hint}", path.display())
        };
        let mut file = std::fs::File::open(path).map_err(cannot_read)?;
        let mut hasher = Sha256::new();
        let mut chunk = [0u8; 16 * 1024];
        let mut first = true;
        loop {
            match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    // Before any module loaded earlier is handed out: the same
                    // bytes may have been allowed from another source.
                    if std::mem::take(&mut first) {
                        refuse_artifact(&chunk[..n], precompiled)
                            .with_context(|| path.display().to_string())?;
                    }
                    hasher.update(&chunk[..n])
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(cannot_read(e)),
            }
        }
        let key: [u8; 32] = hasher.finalize().into();
        if let Some(module) = self.loaded_module(&key) {
            return Ok((module, key));
        }
        // Claimed under the streamed hash: if the file is replaced before it
        // is read below, two loaders may compile it, which is only waste.
        let _turn = self.load_turn(key);
        if let Some(module) = self.loaded_module(&key) {
            return Ok((module, key)); // another thread loaded it meanwhile
        }
        // New bytes. Hash what is compiled, not what was hashed above: the
        // file may have been replaced in between.
        let bytes = std::fs::read(path).map_err(cannot_read)?;
        let key = sha256(&bytes);
        let binary = match std::str::from_utf8(&bytes) {
            Ok(text) if starts_like_wat(text) => wat::Parser::new()
                .parse_bytes(Some(path), &bytes)
                .map_err(|e| anyhow::anyhow!("invalid WebAssembly text: {e}"))?,
            _ => std::borrow::Cow::Borrowed(&bytes[..]),
        };
        let module = self
            .load_new(&binary, key, precompiled)
            .with_context(|| path.display().to_string())?;
        Ok((module, key))
    }

    fn load_module_keyed(&self, bytes: &[u8], key: [u8; 32]) -> Result<Module> {
        if let Some(module) = self.loaded_module(&key) {
            return Ok(module);
        }
        let _turn = self.load_turn(key);
        self.load_new(bytes, key, PrecompiledPolicy::Refused)
    }

    /// Compiles or deserializes `bytes` unless a module with `key` is
    /// loaded by now, and keeps it.
    fn load_new(
        &self,
        bytes: &[u8],
        key: [u8; 32],
        precompiled: PrecompiledPolicy,
    ) -> Result<Module> {
        if let Some(module) = self.loaded_module(&key) {
            return Ok(module);
        }
        let module = self.compile_or_deserialize(bytes, precompiled)?;
        let stamp = self.next_load_stamp();
        self.inner
            .loaded
            .lock()
            .unwrap()
            .insert(key, (module.clone(), stamp));
        Ok(module)
    }

    /// Waits until no other thread is loading the bytes with hash `key`,
    /// then claims them until the returned turn is dropped. The caller
    /// checks `loaded` again: the previous holder usually left the module
    /// there (if it failed, this caller tries, and reports its own error).
    fn load_turn(&self, key: [u8; 32]) -> LoadTurn<'_> {
        let mut loading = self.inner.loading.lock().unwrap();
        while loading.contains(&key) {
            loading = self.inner.load_done.wait(loading).unwrap();
        }
        loading.insert(key);
        LoadTurn {
            inner: &self.inner,
            key,
        }
    }

    /// The module loaded before from bytes with this hash, marked as used now.
    fn loaded_module(&self, key: &[u8; 32]) -> Option<Module> {
        let stamp = self.next_load_stamp();
        let mut loaded = self.inner.loaded.lock().unwrap();
        let (module, used) = loaded.get_mut(key)?;
        *used = stamp;
        Some(module.clone())
    }

    fn next_load_stamp(&self) -> u64 {
        self.inner.load_stamp.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A stamp to pass to [`Runtime::forget_modules_unused_since`] later.
    pub fn module_load_stamp(&self) -> u64 {
        self.inner.load_stamp.load(Ordering::Relaxed)
    }

    /// Drops the runtime's reference to every module not loaded since
    /// `stamp` (plugins still using one keep it alive). A gateway calls this
    /// after a reload, with the stamp taken before building, so the modules
    /// only the old configuration used are freed with it.
    pub fn forget_modules_unused_since(&self, stamp: u64) {
        self.inner
            .loaded
            .lock()
            .unwrap()
            .retain(|_, (_, used)| *used > stamp);
        self.inner
            .loaded_components
            .lock()
            .unwrap()
            .retain(|_, (_, used)| *used > stamp);
    }

    /// Compiles (or finds in the cache) the component in file `path`, and
    /// returns it with the SHA-256 of its bytes. A component loaded before
    /// from the same bytes is returned again. A precompiled component loads
    /// only when `precompiled` allows it, as a module's does.
    pub fn load_component_file(
        &self,
        path: &Path,
        precompiled: PrecompiledPolicy,
    ) -> Result<(Component, [u8; 32])> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        // Before any component loaded earlier is handed out: the same bytes
        // may have been allowed from another source.
        refuse_artifact(&bytes, precompiled).with_context(|| path.display().to_string())?;
        let key = sha256(&bytes);
        let stamp = self.next_load_stamp();
        if let Some((component, used)) = self.inner.loaded_components.lock().unwrap().get_mut(&key)
        {
            *used = stamp;
            return Ok((component.clone(), key));
        }
        let _turn = self.load_turn(key);
        let component = self
            .compile_component(&bytes, precompiled)
            .with_context(|| path.display().to_string())?;
        self.inner
            .loaded_components
            .lock()
            .unwrap()
            .insert(key, (component.clone(), stamp));
        Ok((component, key))
    }

    fn compile_component(&self, bytes: &[u8], precompiled: PrecompiledPolicy) -> Result<Component> {
        refuse_artifact(bytes, precompiled)?;
        if let Some(kind) = Engine::detect_precompiled(bytes) {
            anyhow::ensure!(
                kind == ArtifactKind::Component,
                "this precompiled artifact is a core module, not a component"
            );
            // SAFETY: `refuse_artifact` let it through, so the operator named
            // this file and allowed precompiled code (PrecompiledPolicy).
            #[allow(unsafe_code)]
            let component = unsafe { Component::deserialize(self.engine(), bytes) };
            return component.map_err(anyhow::Error::from).context(
                "loading a precompiled component (was it compiled by this wasmgate version?)",
            );
        }
        anyhow::ensure!(is_component(bytes), "not a WebAssembly component");
        match &self.inner.cache {
            Some(cache) => cache.load_or_compile(self.engine(), bytes),
            None => Component::new(self.engine(), bytes)
                .map_err(|e| anyhow::Error::from(e).context("invalid WebAssembly component")),
        }
    }

    fn compile_or_deserialize(
        &self,
        bytes: &[u8],
        precompiled: PrecompiledPolicy,
    ) -> Result<Module> {
        refuse_artifact(bytes, precompiled)?;
        if let Some(kind) = Engine::detect_precompiled(bytes) {
            anyhow::ensure!(
                kind == ArtifactKind::Module,
                "this precompiled artifact is a component, not a core module"
            );
            // SAFETY: `refuse_artifact` let it through, so the operator named
            // this file and allowed precompiled modules (PrecompiledPolicy).
            #[allow(unsafe_code)]
            let module = unsafe { Module::deserialize(self.engine(), bytes) };
            return module.map_err(anyhow::Error::from).context(
                "loading a precompiled module (was it compiled by this wasmgate version?)",
            );
        }
        validate_magic(bytes)?;
        match &self.inner.cache {
            Some(cache) => cache.load_or_compile(self.engine(), bytes),
            None => Module::new(self.engine(), bytes).map_err(explain_compile_error),
        }
    }

    /// Ahead-of-time compile wasm (a module or a component) into an
    /// artifact for [`Runtime::load_module_file`] or
    /// [`Runtime::load_component_file`].
    pub fn precompile(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        validate_magic(bytes)?;
        let artifact = match is_component(bytes) {
            true => self.engine().precompile_component(bytes),
            false => self.engine().precompile_module(bytes),
        };
        artifact.map_err(explain_compile_error)
    }
}

/// A claim on loading one module's bytes; see [`Runtime::load_turn`].
struct LoadTurn<'a> {
    inner: &'a RuntimeInner,
    key: [u8; 32],
}

impl Drop for LoadTurn<'_> {
    fn drop(&mut self) {
        // Also on an error or a panic, so that waiters never hang.
        let mut loading = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
        loading.remove(&self.key);
        self.inner.load_done.notify_all();
    }
}

/// How every precompiled artifact begins: wasmtime writes ELF objects.
/// Neither wasm (`\0asm`) nor WAT text can start this way.
const ARTIFACT_MAGIC: &[u8] = b"\x7fELF";

/// Fails when `start` (the first bytes of a module) is a precompiled
/// artifact and `policy` refuses those.
fn refuse_artifact(start: &[u8], policy: PrecompiledPolicy) -> Result<()> {
    if policy == PrecompiledPolicy::Refused && start.starts_with(ARTIFACT_MAGIC) {
        anyhow::bail!(
            "this is a precompiled module (native code, which runs outside the sandbox's checks), and precompiled modules are not allowed here: give the .wasm (wasmgate compiles and caches it); a .cwasm you made with `wasmgate compile` loads only from a file named in the configuration file with `allow_precompiled: true`, or with `--allow-precompiled` on the command line, never through the admin API, etcd or a URL"
        );
    }
    Ok(())
}

/// Whether `bytes` (the first 8 are enough) begin a component rather than a
/// core module: after the `\0asm` magic, a binary's version is followed by
/// its layer, 0 for modules and 1 for components.
pub fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes.starts_with(b"\0asm") && bytes[6..8] == [1, 0]
}

/// A quick, specific error for files that are not wasm at all (a common mistake:
/// pointing at the wrong file), before the compiler reports something vaguer.
fn validate_magic(bytes: &[u8]) -> Result<()> {
    let is_binary = bytes.starts_with(b"\0asm");
    let looks_like_wat = std::str::from_utf8(bytes).is_ok_and(starts_like_wat);
    anyhow::ensure!(
        is_binary || looks_like_wat,
        "not a WebAssembly module: expected the \\0asm header or WAT text, found {} bytes starting {:02x?}: check that the path names the .wasm file a build produced (a module or a component), not its source or an archive",
        bytes.len(),
        &bytes[..bytes.len().min(8)]
    );
    Ok(())
}

/// WAT text opens with `(`, perhaps after whitespace and `;;` comment lines.
fn starts_like_wat(mut text: &str) -> bool {
    loop {
        text = text.trim_start();
        match text.strip_prefix(";;") {
            Some(comment) => text = comment.split_once('\n').map_or("", |(_, rest)| rest),
            None => return text.starts_with('('),
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).into()
}

fn explain_compile_error(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from(e).context("invalid WebAssembly module")
}

fn base_config() -> Config {
    let mut config = Config::new();
    config
        .cranelift_opt_level(OptLevel::Speed)
        // Deadlines without a thread per call: compiled code checks a shared
        // epoch counter that one ticker thread advances.
        .epoch_interruption(true)
        .wasm_backtrace_details(WasmBacktraceDetails::Enable);
    // `WASMGATE_PERFMAP=1` writes /tmp/perf-<pid>.map so `perf report` names
    // wasm functions instead of showing bare JIT addresses.
    if std::env::var_os("WASMGATE_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

fn build_engine(config: &RuntimeConfig) -> Result<(Engine, bool)> {
    if config.pooling {
        let mut pool = PoolingAllocationConfig::new();
        // Per slot: an Extism plugin is two core instances (the kernel and
        // the plugin) with a memory each and one table; a Proxy-Wasm filter
        // is three (the filter, and two small modules of the host's with
        // no memory, one with a table: crates/proxy-wasm's giving.rs and
        // batch.rs).
        let (instances, memories, tables) = (3, 2, 2);
        pool.total_core_instances(config.pool_slots.saturating_mul(instances))
            .total_memories(config.pool_slots.saturating_mul(memories))
            .total_tables(config.pool_slots.saturating_mul(tables))
            .total_stacks(config.pool_slots)
            .max_memory_size(config.max_memory_bytes as usize)
            // A freed slot keeps its first 1 MiB resident (zeroed, or reset
            // to the module's data image) so the next instance in it starts
            // without page faults; past that its pages go back to the
            // kernel. Where the kernel has PAGEMAP_SCAN (Linux 6.7+) only
            // the pages the last instance dirtied are reset. Fresh-instance
            // time was the same with 16 MiB kept (Rust 10.6 us either way,
            // a Go plugin's start-up is dominated by its runtime's init), but
            // every freed slot of a Go plugin then held 1-2 MiB more, which
            // is what memory after reloads showed (R5, docs/reliability.md).
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(1 << 16)
            .pagemap_scan(Enabled::Auto);
        let mut pooled = base_config();
        pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        match Engine::new(&pooled) {
            Ok(engine) => return Ok((engine, true)),
            Err(e) => tracing::warn!(
                error = %e,
                "pooling allocator unavailable (virtual memory reservation failed); using on-demand allocation"
            ),
        }
    }
    let engine = Engine::new(&base_config())
        .map_err(anyhow::Error::from)
        .context("creating the wasmtime engine")?;
    Ok((engine, false))
}

#[cfg(test)]
mod tests;
