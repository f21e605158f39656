//! `wasmgate call` and `wasmgate compile`, and what every command's output
//! does when it goes to a pipe or a file.

use crate::common::{plugin, wasmgate};

fn call(args: &[&str]) -> (bool, String, String) {
    let out = wasmgate().arg("call").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn call_prints_the_output() {
    let hello = plugin("hello");
    let (ok, out, err) = call(&[hello.to_str().unwrap(), "hello", "--input", "John Doe"]);
    assert!(ok, "{err}");
    assert_eq!(out, r#"{"message":"Hello John Doe"}"#);
}

#[test]
fn vars_persist_across_repeated_calls_and_config_applies() {
    let p = plugin("count_vowels");
    let (ok, out, err) = call(&[
        p.to_str().unwrap(),
        "count_vowels",
        "--input",
        "aaa",
        "--repeat",
        "3",
        "--config",
        "vowels=a",
    ]);
    assert!(ok, "{err}");
    let totals: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["total"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(totals, vec![3, 6, 9]);
}

#[test]
fn call_reads_stdin_when_it_is_not_a_terminal() {
    use std::io::Write;
    let mut child = wasmgate()
        .args(["call"])
        .arg(plugin("hello"))
        .arg("hello")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Ada").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        r#"{"message":"Hello Ada"}"#
    );
}

#[test]
fn a_missing_function_is_named_with_those_that_exist() {
    let (ok, _, err) = call(&[plugin("hello").to_str().unwrap(), "helo"]);
    assert!(!ok);
    assert!(
        err.contains("Function not found: helo (the plugin exports: hello)"),
        "{err}"
    );
}

#[test]
fn a_proxy_wasm_filter_given_to_serve_or_call_is_sent_to_the_gateway() {
    let (ok, _, err) = call(&[plugin("add_header").to_str().unwrap(), "anything"]);
    assert!(!ok);
    assert!(
        err.contains("is a Proxy-Wasm filter")
            && err.contains("runs in a gateway route's `plugins`"),
        "{err}"
    );
    let out = wasmgate()
        .arg("serve")
        .arg(plugin("add_header"))
        .args(["--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("is a Proxy-Wasm filter"), "{err}");
}

#[test]
fn failed_call_exits_non_zero_with_the_reason() {
    let p = plugin("capabilities");
    let (ok, _, err) = call(&[p.to_str().unwrap(), "fail", "--input", "nope"]);
    assert!(!ok);
    assert!(
        err.contains("plugin_error") && err.contains("nope"),
        "{err}"
    );
}

#[test]
fn compile_then_run_the_precompiled_module() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("hello.cwasm");
    let out = wasmgate()
        .args([
            "compile",
            plugin("hello").to_str().unwrap(),
            "-o",
            cwasm.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::metadata(&cwasm).unwrap().len() > 0);
    // Native code: refused unless the operator says it is theirs.
    let (ok, _, err) = call(&[cwasm.to_str().unwrap(), "hello", "--input", "AOT"]);
    assert!(!ok);
    assert!(
        err.contains("precompiled module") && err.contains("--allow-precompiled"),
        "{err}"
    );
    let (ok, out, err) = call(&[
        cwasm.to_str().unwrap(),
        "hello",
        "--input",
        "AOT",
        "--allow-precompiled",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, r#"{"message":"Hello AOT"}"#);
}

#[test]
fn manifest_with_hash_config_and_relative_path() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(plugin("count_vowels")).unwrap();
    std::fs::write(dir.path().join("cv.wasm"), &wasm).unwrap();
    let hash = hex::encode(Sha256::digest(&wasm));
    let manifest = dir.path().join("plugin.json");
    std::fs::write(
        &manifest,
        format!(r#"{{"wasm":[{{"path":"cv.wasm","hash":"{hash}"}}],"config":{{"vowels":"o"}}}}"#),
    )
    .unwrap();
    let (ok, out, err) = call(&[
        manifest.to_str().unwrap(),
        "count_vowels",
        "--input",
        "foo boo",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, r#"{"count":4,"total":4,"vowels":"o"}"#);

    std::fs::write(
        &manifest,
        format!(
            r#"{{"wasm":[{{"path":"cv.wasm","hash":"{}"}}]}}"#,
            "0".repeat(64)
        ),
    )
    .unwrap();
    let (ok, _, err) = call(&[manifest.to_str().unwrap(), "count_vowels"]);
    assert!(!ok);
    assert!(err.contains("hash mismatch"), "{err}");
}

#[test]
fn allowed_paths_grant_exactly_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "file contents").unwrap();
    let faults = plugin("faults");
    let faults = faults.to_str().unwrap();
    let ro = format!("ro:{}:/data", dir.path().display());
    let rw = format!("{}:/data", dir.path().display());

    let (ok, out, err) = call(&[
        faults,
        "read_file",
        "--input",
        "/data/hello.txt",
        "--allow-path",
        &ro,
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "file contents");
    // Read-only: writing fails; read-write: it works.
    let (ok, _, err) = call(&[
        faults,
        "write_file",
        "--input",
        "/data/new.txt=x",
        "--allow-path",
        &ro,
    ]);
    assert!(!ok, "write through a read-only preopen succeeded");
    assert!(err.contains("plugin_error"), "{err}");
    assert!(!dir.path().join("new.txt").exists());
    let (ok, out, err) = call(&[
        faults,
        "write_file",
        "--input",
        "/data/new.txt=x",
        "--allow-path",
        &rw,
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "written");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new.txt")).unwrap(),
        "x"
    );
    // Nothing granted: no filesystem at all.
    let (ok, _, _) = call(&[faults, "read_file", "--input", "/data/hello.txt"]);
    assert!(!ok);
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(&config, "routes: [{name: r, respond: {}}]\n").unwrap();
    let hello = plugin("hello");
    let commands: [&[&str]; 3] = [
        &["schema"],
        &["check", "-c", config.to_str().unwrap()],
        &[
            "call",
            hello.to_str().unwrap(),
            "hello",
            "--input",
            "x",
            "--repeat",
            "3",
        ],
    ];
    for args in commands {
        // A pipe whose reader is gone before the command writes: as
        // `wasmgate schema | head -1` once head has exited.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = wasmgate().args(args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(&config, "routes: [{name: r, respond: {}}]\n").unwrap();
    // An admin file while admin_writes is off: `check` warns about it.
    std::fs::write(dir.path().join("gw.admin.yaml"), "routes: []\n").unwrap();
    let log = std::fs::File::create(dir.path().join("log.txt")).unwrap();
    let status = wasmgate()
        .args(["check", "-c", config.to_str().unwrap()])
        .env_remove("NO_COLOR")
        .stderr(log)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file: {text:?}"
    );
}
