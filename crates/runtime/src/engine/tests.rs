//! The engine's tests: the pooling allocator and its fallback, what a
//! module file may be (wasm, text, a precompiled artifact where allowed),
//! and loads of one file sharing one module.

use super::*;

#[test]
fn falls_back_to_on_demand_allocation_when_the_pool_cannot_be_reserved() {
    // A billion 4 GiB slots cannot be reserved in any address space.
    let runtime = Runtime::new(RuntimeConfig {
        pool_slots: 1_000_000_000,
        ..RuntimeConfig::default()
    })
    .unwrap();
    assert!(!runtime.pooling());
    let module = runtime
        .load_module(b"(module (func (export \"f\")))")
        .unwrap();
    let mut store = wasmtime::Store::new(runtime.engine(), ());
    wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
}

#[test]
fn pooling_is_used_when_available() {
    assert!(Runtime::new(RuntimeConfig::default()).unwrap().pooling());
}

/// A runtime without the pooling allocator: these tests load modules and
/// need no instance slots reserved.
fn unpooled_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn rejects_files_that_are_not_wasm() {
    let runtime = unpooled_runtime();
    let err = runtime.load_module(b"PK\x03\x04 a zip file").unwrap_err();
    assert!(
        err.to_string().contains("not a WebAssembly module"),
        "{err}"
    );
    assert!(runtime.load_module(b";; a comment first\n(module)").is_ok());
    let err = runtime
        .load_module(b"\0asm\x01\0\0\0\x99garbage")
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("invalid WebAssembly module"),
        "{err:#}"
    );
}

#[test]
fn a_file_loaded_again_gives_the_same_module_and_its_hash() {
    use sha2::{Digest, Sha256};
    let runtime = unpooled_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    // Bigger than the hashing chunk, so the file is hashed in pieces.
    let big = format!("(module (data \"{}\"))", "x".repeat(100_000));
    std::fs::write(&path, &big).unwrap();
    let (first, hash) = runtime
        .load_module_file(&path, PrecompiledPolicy::Refused)
        .unwrap();
    assert_eq!(hash, <[u8; 32]>::from(Sha256::digest(big.as_bytes())));
    let (again, hash_again) = runtime
        .load_module_file(&path, PrecompiledPolicy::Refused)
        .unwrap();
    assert!(Module::same(&first, &again));
    assert_eq!(hash, hash_again);
    // Loading the same bytes from memory also finds it.
    assert!(Module::same(
        &first,
        &runtime.load_module(big.as_bytes()).unwrap()
    ));

    std::fs::write(&path, "(module (func (export \"f\")))").unwrap();
    let (changed, changed_hash) = runtime
        .load_module_file(&path, PrecompiledPolicy::Refused)
        .unwrap();
    assert!(!Module::same(&first, &changed));
    assert_ne!(hash, changed_hash);
    assert!(changed.get_export("f").is_some());

    let err = runtime
        .load_module_file(&dir.path().join("missing.wasm"), PrecompiledPolicy::Refused)
        .unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
    std::fs::write(&path, "not wasm").unwrap();
    let err = format!(
        "{:#}",
        runtime
            .load_module_file(&path, PrecompiledPolicy::Refused)
            .unwrap_err()
    );
    assert!(
        err.starts_with(&format!("{}: not a WebAssembly module", path.display())),
        "{err}"
    );
    // WAT syntax errors name the file and line.
    std::fs::write(&path, "(module\n  (func (export \"f\"))\n  bad)").unwrap();
    let err = format!(
        "{:#}",
        runtime
            .load_module_file(&path, PrecompiledPolicy::Refused)
            .unwrap_err()
    );
    assert!(err.contains(&format!("{}:3:", path.display())), "{err}");
}

/// A precompiled artifact is native code: it loads from a file only
/// when the caller allows it, never from bytes, and a module loaded
/// once from an allowed file is not handed out to a refusing caller.
#[test]
fn precompiled_artifacts_load_only_where_allowed() {
    let runtime = unpooled_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.cwasm");
    let artifact = runtime
        .precompile(b"(module (func (export \"f\")))")
        .unwrap();
    std::fs::write(&path, &artifact).unwrap();
    let refused = |result: Result<Module>| {
        let err = format!("{:#}", result.unwrap_err());
        assert!(err.contains("precompiled module"), "{err}");
        assert!(err.contains("allow_precompiled"), "{err}");
    };
    refused(
        runtime
            .load_module_file(&path, PrecompiledPolicy::Refused)
            .map(|(m, _)| m),
    );
    refused(runtime.load_module(&artifact));
    let (allowed, _) = runtime
        .load_module_file(&path, PrecompiledPolicy::Allowed)
        .unwrap();
    assert!(allowed.get_export("f").is_some());
    refused(
        runtime
            .load_module_file(&path, PrecompiledPolicy::Refused)
            .map(|(m, _)| m),
    );
    refused(runtime.load_module(&artifact));
}

/// The same for components: a precompiled component allowed from the
/// operator's file is not handed out again to a caller that refuses
/// precompiled code (the admin API, etcd, a URL or a registry).
#[test]
fn precompiled_components_load_only_where_allowed() {
    let runtime = unpooled_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.cwasm");
    let component = wat::parse_str("(component)").unwrap();
    std::fs::write(&path, runtime.precompile(&component).unwrap()).unwrap();
    let refused = |policy| {
        let err = format!(
            "{:#}",
            runtime.load_component_file(&path, policy).unwrap_err()
        );
        assert!(err.contains("precompiled module"), "{err}");
        assert!(err.contains("allow_precompiled"), "{err}");
    };
    refused(PrecompiledPolicy::Refused);
    runtime
        .load_component_file(&path, PrecompiledPolicy::Allowed)
        .unwrap();
    refused(PrecompiledPolicy::Refused);
}

/// Plugins of one configuration load in parallel; those naming the same
/// file must share one load (one `Module`, one memory image), not race
/// to make one each.
#[test]
fn parallel_loads_of_one_file_share_one_module() {
    let runtime = unpooled_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wat");
    // Enough functions that compiling takes a while, so the threads overlap.
    let funcs: String = (0..400)
        .map(|i| format!("(func (export \"f{i}\") (param i32) (result i32) local.get 0 i32.const {i} i32.add)"))
        .collect();
    std::fs::write(&path, format!("(module {funcs})")).unwrap();
    let start = std::sync::Barrier::new(8);
    let modules: Vec<Module> = std::thread::scope(|scope| {
        let loads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    runtime
                        .load_module_file(&path, PrecompiledPolicy::Refused)
                        .unwrap()
                        .0
                })
            })
            .collect();
        loads.into_iter().map(|l| l.join().unwrap()).collect()
    });
    for module in &modules[1..] {
        assert!(Module::same(&modules[0], module));
    }
    assert!(runtime.inner.loading.lock().unwrap().is_empty());
}
