//! docs/first-plugin.md, as a new user follows it: each example of
//! examples/first-plugin/ built with its SDK's own toolchain (the commands
//! the page gives) and run through the CLI, with the outputs the page shows.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::gateway::{get, with_upstream};
use crate::common::{client, wasmgate};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/first-plugin")
        .join(name)
}

/// Runs `command` in `dir`; panics with its output when it fails.
fn build(dir: &Path, command: &mut Command) {
    let out = command.current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "building {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wasmgate call PLUGIN FUNCTION ARGS...`: (stdout, stderr).
fn call(plugin: &Path, args: &[&str]) -> (String, String) {
    let out = wasmgate()
        .arg("call")
        .arg(plugin)
        .args(args)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rust_extism_function() {
    let dir = example("rust-extism");
    build(
        &dir,
        Command::new("cargo").args(["build", "--release", "--target", "wasm32-unknown-unknown"]),
    );
    let wasm = dir.join("target/wasm32-unknown-unknown/release/greet.wasm");
    assert_eq!(call(&wasm, &["greet", "--input", "Ada"]).0, "Hello, Ada!");
    let (_, err) = call(&wasm, &["greet", "--input", ""]);
    assert!(err.contains("plugin_error"), "{err}");
}

#[test]
fn go_extism_function() {
    let dir = example("go-extism");
    build(
        &dir,
        Command::new("go")
            .args(["build", "-buildmode=c-shared", "-o", "plugin.wasm", "."])
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm"),
    );
    let wasm = dir.join("plugin.wasm");
    assert_eq!(
        call(&wasm, &["greet", "--input", "Gopher"]).0,
        "Hello, Gopher!"
    );
    let (out, _) = call(
        &wasm,
        &["greet", "--input", "Gopher", "--config", "greeting=Ciao"],
    );
    assert_eq!(out, "Ciao, Gopher!");
}

#[test]
fn wat_extism_function_needs_no_toolchain() {
    let wat = example("wat/shout.wat");
    assert_eq!(
        call(&wat, &["shout", "--input", "hello, wasm"]).0,
        "HELLO, WASM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_proxy_wasm_filter_on_a_route() {
    let dir = example("rust-filter");
    build(
        &dir,
        Command::new("cargo").args(["build", "--release", "--target", "wasm32-wasip1"]),
    );
    // The page's configuration checks quietly, even with --strict.
    let out = wasmgate()
        .args(["check", "--strict", "-c"])
        .arg(dir.join("wasmgate.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its route, on free ports.
    let wasm = dir.join("target/wasm32-wasip1/release/first_filter.wasm");
    let (_upstream, gw) = with_upstream(
        "files",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: first_filter, wasm: "{}"}}
upstreams:
  - {{name: files, nodes: [{{address: "{{backend}}"}}]}}
routes:
  - {{name: all, path: {{prefix: /}}, plugins: [{{plugin: first_filter, conf: hello from my first filter}}], upstream: files}}
"#,
            wasm.display()
        ),
    )
    .await;
    let reply = get(&client(), &gw.url("/")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.headers["x-first-plugin"],
        "hello from my first filter"
    );
}

/// Section 5: the Rust component built with its toolchain, served, and
/// answering every method and path with the environment the flag gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_wasi_http_component() {
    let dir = example("rust-component");
    build(
        &dir,
        Command::new("cargo").args(["build", "--release", "--target", "wasm32-wasip2"]),
    );
    let wasm = dir.join("target/wasm32-wasip2/release/hello_component.wasm");
    let server = crate::common::Server::start(&[
        wasm.to_str().unwrap(),
        "--env",
        "GREETING=Hi",
        "--access-log",
        "off",
    ]);
    let c = client();
    let reply = get(&c, &server.url("/")).await;
    assert_eq!(reply.text(), "Hi from a component: GET /\n");
    let reply =
        crate::common::gateway::send(&c, "POST", &server.url("/orders?id=7"), &[], "").await;
    assert_eq!(reply.text(), "Hi from a component: POST /orders?id=7\n");
}
