//! Plugins from OCI registries (docs/plugins.md), from outside: a real
//! registry (CNCF distribution's, built from source) started on a free port,
//! plugins built from source pushed to it with `oras` in the layouts in use
//! (the Wasm OCI artifact, Istio's and Higress's "compat" layer, Higress's
//! image with `plugin.wasm` in its last layer), and pulled by `wasmgate
//! serve`/`call`/`compile`/`check`, a gateway (every plugin kind) and a
//! three-node cluster on etcd: by tag and by digest, with htpasswd, a
//! token service, TLS and Docker's config.json; tags that move; and each
//! failure a user can run into, with the previous version still serving.

use std::path::Path;
use std::process::Output;

use crate::common::gateway::{admin, send, GatewayProc};
use crate::common::{client, plugin, HttpClient, Server};
use serde_json::Value;
use wasmgate_testkit::{EtcdServer, RegistryAuth, RegistryOptions, RegistryServer, TokenService};

const WASM_ARTIFACT: &str = "application/vnd.wasm.content.layer.v1+wasm";
const COMPAT_LAYER: &str = "application/vnd.module.wasm.content.layer.v1+wasm";

/// `wasmgate <args>` with its own cache directory `cache`: what it pulled
/// before is all it knows.
fn wasmgate(cache: &Path, args: &[&str]) -> Output {
    crate::common::wasmgate()
        .env("WASMGATE_CACHE_DIR", cache)
        .args(args)
        .output()
        .expect("running wasmgate")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The `/status` entry of plugin `name`.
async fn plugin_status(c: &HttpClient, gw: &GatewayProc, name: &str) -> Value {
    let status = admin(c, gw, "GET", "/status", "").await.json();
    status["plugins"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no plugin {name} in {status}"))
}

/// `wasmgate call` and `compile` pull by tag and by digest, in each layout,
/// from the registry and then from their store; `serve` serves a pulled
/// module; a digest pins, a tag follows its pull policy.
#[test]
fn call_serve_and_compile_pull_by_tag_and_digest_in_every_layout() {
    let registry = RegistryServer::start();
    let host = registry.host();
    let cache = tempfile::tempdir().unwrap();
    let hello = plugin("hello");
    let artifact = registry.push_wasm("plugins/hello:1.0", &hello, WASM_ARTIFACT, "a");
    let compat = registry.push_wasm("plugins/hello-compat:1.0", &hello, COMPAT_LAYER, "b");
    let image = registry.push_higress_image("plugins/hello-image:1.0", &hello, "c");

    for (reference, digest) in [
        (format!("oci://{host}/plugins/hello:1.0"), &artifact),
        (format!("oci://{host}/plugins/hello-compat:1.0"), &compat),
        (format!("oci://{host}/plugins/hello-image:1.0"), &image),
        (format!("oci://{host}/plugins/hello-image@{image}"), &image),
    ] {
        let out = wasmgate(
            cache.path(),
            &[
                "call",
                &reference,
                "hello",
                "--input",
                "oci",
                "--plain-http",
            ],
        );
        assert!(out.status.success(), "{reference}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            r#"{"message":"Hello oci"}"#
        );
        assert!(
            text(&out).contains(&format!("@{digest}")),
            "the pull logs the digest: {}",
            text(&out)
        );
    }

    // The command line's --sha256 is not "the configuration".
    let pinned = wasmgate(
        cache.path(),
        &[
            "call",
            &format!("oci://{host}/plugins/hello:1.0"),
            "hello",
            "--plain-http",
            "--sha256",
            &"0".repeat(64),
        ],
    );
    assert!(!pinned.status.success(), "{}", text(&pinned));
    assert!(
        text(&pinned).contains(&format!(
            "oci://{host}/plugins/hello:1.0: sha256 mismatch: the sha256 given is"
        )),
        "{}",
        text(&pinned)
    );
    assert!(
        !text(&pinned).contains("configuration"),
        "{}",
        text(&pinned)
    );

    // A config.json whose credential helper is not installed here (a
    // laptop's, copied to a server) does not stop an anonymous pull.
    let docker = tempfile::tempdir().unwrap();
    std::fs::write(
        docker.path().join("config.json"),
        r#"{"credsStore": "wasmgate-test-missing-helper"}"#,
    )
    .unwrap();
    let out = crate::common::wasmgate()
        .env("DOCKER_CONFIG", docker.path())
        .env("WASMGATE_CACHE_DIR", tempfile::tempdir().unwrap().path())
        .args([
            "call",
            &format!("oci://{host}/plugins/hello:1.0"),
            "hello",
            "--input",
            "helper",
            "--plain-http",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("pulling anonymously"), "{}", text(&out));

    // The store has them now: a tag pulled before (if_not_present, the
    // default for a tag other than latest) and a digest need no registry.
    let mut registry = registry;
    registry.stop();
    let out = wasmgate(
        cache.path(),
        &[
            "call",
            &format!("oci://{host}/plugins/hello-image:1.0"),
            "hello",
            "--input",
            "again",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("this node's store"), "{}", text(&out));
    // `always` asks the registry, which is down: refused with the reason.
    let out = wasmgate(
        cache.path(),
        &[
            "call",
            &format!("oci://{host}/plugins/hello:1.0"),
            "hello",
            "--pull",
            "always",
            "--plain-http",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("the registry cannot be reached"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains(&format!("oci://{host}/plugins/hello:1.0")),
        "{}",
        text(&out)
    );

    // `compile` takes a reference; `serve` serves from the store.
    let cwasm = cache.path().join("hello.cwasm");
    let reference = format!("oci://{host}/plugins/hello@{artifact}");
    let out = wasmgate(
        cache.path(),
        &["compile", &reference, "-o", cwasm.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::metadata(&cwasm).unwrap().len() > 0);
    let server = Server::start(&[
        &reference,
        "hello",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let reply = rt.block_on(crate::common::post(&client(), &server.url("/"), "served"));
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), r#"{"message":"Hello served"}"#);
}

/// A gateway runs an Extism function, a Proxy-Wasm filter and a `wasi:http`
/// component pulled from the registry, each in another layout; a tag moved
/// to another module is picked up by a reload (`pull: always`) and only
/// then, while an `if_not_present` tag keeps what it pulled; `/status`,
/// `/metrics` and `wasmgate check` name the digests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_serves_every_plugin_kind_from_a_registry_and_follows_a_moved_tag() {
    let registry = RegistryServer::start();
    let host = registry.host();
    let cache = tempfile::tempdir().unwrap();
    let v1 = registry.push_wasm("fn/greeter:stable", &plugin("hello"), WASM_ARTIFACT, "v1");
    registry.push_wasm("fn/pinned:stable", &plugin("hello"), WASM_ARTIFACT, "v1");
    let filter =
        registry.push_higress_image("filters/add-header:1.0.0", &plugin("add_header"), "f");
    registry.push_wasm(
        "components/handler:1",
        &plugin("component_rust"),
        COMPAT_LAYER,
        "h",
    );
    let yaml = format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
plugins:
  - {{name: greeter, wasm: "oci://{host}/fn/greeter:stable", pull: always, registry: {{plain_http: true}}}}
  - {{name: pinned, wasm: "oci://{host}/fn/pinned:stable", registry: {{plain_http: true}}}}
  - {{name: tag, wasm: "oci://{host}/filters/add-header:1.0.0", sha256: "{filter}", registry: {{plain_http: true}}}}
  - {{name: handler, wasm: "oci://{host}/components/handler:1", registry: {{plain_http: true}}}}
routes:
  - {{name: fn, path: {{prefix: /fn/}}, function: {{plugin: greeter}}}}
  - {{name: pinned, path: {{prefix: /pinned/}}, function: {{plugin: pinned}}}}
  - {{name: component, headers: {{x-route: c}}, plugins: [{{plugin: tag, conf: from-oci}}], component: {{plugin: handler}}}}
"#
    );
    let gw = GatewayProc::start_with(&yaml, &["--cache-dir", cache.path().to_str().unwrap()]);
    let c = client();
    let reply = send(&c, "POST", &gw.url("/fn/hello"), &[], "gateway").await;
    assert_eq!(reply.text(), r#"{"message":"Hello gateway"}"#);
    let reply = send(&c, "GET", &gw.url("/"), &[("x-route", "c")], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), "hello from rust component");
    assert_eq!(reply.headers["x-seen-path"], "/", "the filter ran");
    assert_eq!(
        plugin_status(&c, &gw, "greeter").await["image"],
        format!("oci://{host}/fn/greeter:stable@{v1}")
    );
    assert_eq!(
        plugin_status(&c, &gw, "tag").await["image"],
        format!("oci://{host}/filters/add-header:1.0.0@{filter}")
    );
    let metrics = admin(&c, &gw, "GET", "/metrics", "").await.text();
    assert!(
        metrics.contains(&format!(
            r#"image="oci://{host}/fn/greeter:stable@{v1}"}} 1"#
        )),
        "{metrics}"
    );

    // Both tags move to another module; a reload follows only `always`.
    let v2 = registry.push_wasm(
        "fn/greeter:stable",
        &plugin("count_vowels"),
        WASM_ARTIFACT,
        "v2",
    );
    registry.push_wasm(
        "fn/pinned:stable",
        &plugin("count_vowels"),
        WASM_ARTIFACT,
        "v2",
    );
    assert_ne!(v1, v2);
    let reload = admin(&c, &gw, "POST", "/reload", "").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let reply = send(&c, "POST", &gw.url("/fn/count_vowels"), &[], "oci").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["count"], 2);
    assert_eq!(
        plugin_status(&c, &gw, "greeter").await["image"],
        format!("oci://{host}/fn/greeter:stable@{v2}")
    );
    let reply = send(&c, "POST", &gw.url("/pinned/hello"), &[], "still").await;
    assert_eq!(
        reply.text(),
        r#"{"message":"Hello still"}"#,
        "if_not_present keeps its pull"
    );
    gw.logs_with(&["resolved the tag to a digest", &v2]);

    // `wasmgate check` pulls too, and names the digests.
    let out = wasmgate(cache.path(), &["check", "-c", gw.config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("from oci://{host}/fn/greeter:stable@{v2}")),
        "{}",
        text(&out)
    );
}

/// Everything that can go wrong with a pull is a rejected change naming
/// the reference and the reason, and the version before keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_pull_is_refused_with_its_reason_and_the_running_version_keeps_serving() {
    let mut registry = RegistryServer::start();
    let host = registry.host();
    let cache = tempfile::tempdir().unwrap();
    let good = registry.push_wasm("fn/greeter:1", &plugin("hello"), WASM_ARTIFACT, "good");
    // A layer that is no module; one over the limit (1 MiB here).
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("notes.txt"), "not wasm").unwrap();
    registry.push_file("fn/text:1", &files.path().join("notes.txt"), "text/plain");
    std::fs::write(
        files.path().join("fake.wasm"),
        "PK\x03\x04 a zip, not a module",
    )
    .unwrap();
    registry.push_wasm(
        "fn/fake:1",
        &files.path().join("fake.wasm"),
        WASM_ARTIFACT,
        "z",
    );
    let big: Vec<u8> = b"\0asm\x01\0\0\0"
        .iter()
        .copied()
        .chain(vec![7u8; 2 << 20])
        .collect();
    std::fs::write(files.path().join("big.wasm"), big).unwrap();
    registry.push_wasm(
        "fn/big:1",
        &files.path().join("big.wasm"),
        WASM_ARTIFACT,
        "big",
    );

    let gw = GatewayProc::start_with(
        &format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
admin_writes: true
grants: {{env: ["WASMGATE_TEST_*"]}}
plugins:
  - {{name: greeter, wasm: "oci://{host}/fn/greeter:1", registry: {{plain_http: true}}}}
routes:
  - {{name: fn, path: {{prefix: /fn/}}, function: {{plugin: greeter}}}}
"#
        ),
        &["--cache-dir", cache.path().to_str().unwrap()],
    );
    let c = client();
    // Each refusal names the reference it pulled, then why (docs/plugins.md).
    let plain = r#""registry": {"plain_http": true}"#;
    let cases: [(String, String, &str); 7] = [
        (
            format!(r#"{{"wasm": "oci://{host}/fn/greeter:nope", {plain}}}"#),
            format!("oci://{host}/fn/greeter:nope: "),
            "no such tag, digest or repository",
        ),
        (
            format!(
                r#"{{"wasm": "oci://{host}/fn/greeter:1", "sha256": "{}", {plain}}}"#,
                "0".repeat(64)
            ),
            format!("oci://{host}/fn/greeter:1: "),
            "sha256 mismatch: the sha256 given is",
        ),
        (
            format!(r#"{{"wasm": "oci://{host}/fn/text:1", {plain}}}"#),
            format!("oci://{host}/fn/text:1: "),
            "no layer holds a Wasm module",
        ),
        (
            format!(r#"{{"wasm": "oci://{host}/fn/fake:1", {plain}}}"#),
            format!("oci://{host}/fn/fake:1: "),
            "not a Wasm module",
        ),
        (
            format!(
                r#"{{"wasm": "oci://{host}/fn/big:1", "registry": {{"plain_http": true, "max_mb": 1}}}}"#
            ),
            format!("oci://{host}/fn/big:1: "),
            "larger than the limit",
        ),
        (
            // HTTPS is the default; this registry speaks plain HTTP.
            format!(r#"{{"wasm": "oci://{host}/fn/greeter:1", "pull": "always"}}"#),
            format!("oci://{host}/fn/greeter:1: "),
            "--plain-http",
        ),
        (
            r#"{"wasm": "oci://reg.example/fn/greeter:1", "registry": {"plain_http": true, "password_env": "WASMGATE_TEST_UNSET"}}"#
                .to_string(),
            String::new(),
            "`username` and `password`",
        ),
    ];
    for (body, reference, reason) in cases {
        let put = admin(&c, &gw, "PUT", "/plugins/greeter", &body).await;
        assert_eq!(put.status, 422, "{body}: {}", put.text());
        assert!(put.text().contains(reason), "{body}: {}", put.text());
        assert!(put.text().contains(&reference), "{body}: {}", put.text());
        let reply = send(&c, "POST", &gw.url("/fn/hello"), &[], "kept").await;
        assert_eq!(reply.text(), r#"{"message":"Hello kept"}"#);
    }
    // A registry that takes the connection and never answers: the pull's
    // deadline.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_host = silent.local_addr().unwrap().to_string();
    let body = format!(
        r#"{{"wasm": "oci://{silent_host}/fn/greeter:1", "registry": {{"plain_http": true, "timeout_ms": 300}}}}"#
    );
    let put = admin(&c, &gw, "PUT", "/plugins/greeter", &body).await;
    assert_eq!(put.status, 422, "{}", put.text());
    assert!(
        put.text().contains(&format!(
            "oci://{silent_host}/fn/greeter:1: no answer from the registry in 300ms"
        )),
        "{}",
        put.text()
    );
    drop(silent);
    // The registry down: a tag that must be asked for fails, and says so.
    registry.stop();
    let body = format!(r#"{{"wasm": "oci://{host}/fn/greeter:1", "pull": "always", {plain}}}"#);
    let put = admin(&c, &gw, "PUT", "/plugins/greeter", &body).await;
    assert_eq!(put.status, 422, "{}", put.text());
    assert!(
        put.text().contains("the registry cannot be reached"),
        "{}",
        put.text()
    );
    // ... while a digest this node has pulled needs no registry.
    let body = format!(r#"{{"wasm": "oci://{host}/fn/greeter@{good}", {plain}}}"#);
    let put = admin(&c, &gw, "PUT", "/plugins/greeter", &body).await;
    assert!(put.status < 300, "{}", put.text());
    let reply = send(&c, "POST", &gw.url("/fn/hello"), &[], "kept").await;
    assert_eq!(reply.text(), r#"{"message":"Hello kept"}"#);
}

/// A registry is not the operator's disk: a precompiled module (native
/// code) pulled from one is refused, even by a configuration file that
/// allows precompiled modules from its own files; `call` refuses its
/// `--allow-precompiled` for a registry's module.
#[test]
fn a_precompiled_module_from_a_registry_is_refused() {
    let registry = RegistryServer::start();
    let host = registry.host();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cwasm = dir.path().join("hello.cwasm");
    let compiled = wasmgate(
        cache.path(),
        &[
            "compile",
            plugin("hello").to_str().unwrap(),
            "-o",
            cwasm.to_str().unwrap(),
        ],
    );
    assert!(compiled.status.success(), "{}", text(&compiled));
    registry.push_wasm("fn/native:1", &cwasm, WASM_ARTIFACT, "native");
    let config = dir.path().join("gw.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
listen: "127.0.0.1:1"
allow_precompiled: true
plugins:
  - {{name: native, wasm: "oci://{host}/fn/native:1", registry: {{plain_http: true}}}}
routes:
  - {{name: fn, function: {{plugin: native}}}}
"#
        ),
    )
    .unwrap();
    let reference = format!("oci://{host}/fn/native:1");
    let checked = wasmgate(cache.path(), &["check", "-c", config.to_str().unwrap()]);
    assert!(!checked.status.success(), "{}", text(&checked));
    assert!(
        text(&checked).contains(&format!(
            "{reference}: the layer holds a precompiled module"
        )),
        "{}",
        text(&checked)
    );
    assert!(
        text(&checked).contains("plugins[native]: "),
        "{}",
        text(&checked)
    );
    let called = wasmgate(cache.path(), &["call", &reference, "hello", "--plain-http"]);
    assert!(!called.status.success(), "{}", text(&called));
    assert!(
        text(&called).contains(&format!(
            "{reference}: the layer holds a precompiled module"
        )),
        "{}",
        text(&called)
    );
    let allowed = wasmgate(
        cache.path(),
        &[
            "call",
            &reference,
            "hello",
            "--plain-http",
            "--allow-precompiled",
        ],
    );
    assert!(!allowed.status.success(), "{}", text(&allowed));
    assert!(
        text(&allowed).contains(&format!(
            "{reference}: --allow-precompiled: a module from a registry is never loaded precompiled"
        )),
        "{}",
        text(&allowed)
    );
}

/// Basic auth (htpasswd) with the password from the configuration or the
/// environment, never shown back; the bearer-token flow against a token
/// service; Docker's config.json as `oras login` leaves it; HTTPS with a
/// private CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_config_environment_and_docker_config_token_flow_and_tls() {
    let pki = wasmgate_testkit::pki::Pki::new("registry CA");
    let certificate = pki.server(
        &["IP:127.0.0.1"],
        wasmgate_testkit::pki::KeyType::EcdsaP256,
        2,
        1,
    );
    let registry = RegistryServer::start_with(RegistryOptions {
        auth: RegistryAuth::Htpasswd {
            user: "ci".into(),
            password: "s3cret-pass".into(),
        },
        tls: Some((certificate, pki.ca.clone())),
    });
    let host = registry.host();
    let cache = tempfile::tempdir().unwrap();
    registry.push_wasm("private/hello:1", &plugin("hello"), WASM_ARTIFACT, "p");
    let ca = pki.ca.display().to_string();
    let gw = GatewayProc::start_with_env(
        &format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
admin_writes: true
plugins:
  - {{name: inline, wasm: "oci://{host}/private/hello:1", registry: {{ca_file: "{ca}", username: ci, password: s3cret-pass}}}}
  - {{name: from-env, wasm: "oci://{host}/private/hello:1", pull: always, registry: {{ca_file: "{ca}", username: ci, password_env: WASMGATE_TEST_OCI_PASSWORD}}}}
routes:
  - {{name: a, path: {{prefix: /a/}}, function: {{plugin: inline}}}}
  - {{name: b, path: {{prefix: /b/}}, function: {{plugin: from-env}}}}
"#
        ),
        &["--cache-dir", cache.path().to_str().unwrap()],
        &[("WASMGATE_TEST_OCI_PASSWORD", "s3cret-pass")],
    );
    let c = client();
    for path in ["/a/hello", "/b/hello"] {
        let reply = send(&c, "POST", &gw.url(path), &[], "tls").await;
        assert_eq!(reply.text(), r#"{"message":"Hello tls"}"#);
    }
    // The password is never shown back, nor logged.
    for path in ["/plugins/inline", "/config"] {
        let shown = admin(&c, &gw, "GET", path, "").await.text();
        assert!(!shown.contains("s3cret-pass"), "{path}: {shown}");
        assert!(shown.contains("<redacted>"), "{path}: {shown}");
    }
    assert!(!gw.logs().contains("s3cret-pass"));
    // Wrong or missing credentials, or no CA: refused, saying why.
    for (registry_settings, reason) in [
        (
            format!(r#"{{"ca_file": "{ca}", "username": "ci", "password": "wrong"}}"#),
            "the registry refused",
        ),
        (
            format!(r#"{{"ca_file": "{ca}"}}"#),
            "the registry wants credentials and none were given",
        ),
        (
            r#"{"username": "ci", "password": "s3cret-pass"}"#.to_string(),
            "certificate is not trusted",
        ),
    ] {
        let body = format!(
            r#"{{"wasm": "oci://{host}/private/hello:1", "pull": "always", "registry": {registry_settings}}}"#
        );
        let put = admin(&c, &gw, "PUT", "/plugins/inline", &body).await;
        assert_eq!(put.status, 422, "{body}: {}", put.text());
        assert!(
            put.text().to_lowercase().contains(reason),
            "{body}: {}",
            put.text()
        );
        assert!(!put.text().contains("s3cret-pass"), "{}", put.text());
    }

    // `oras login` writes Docker's config.json; `serve` reads it.
    let docker = tempfile::tempdir().unwrap();
    let login = std::process::Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-bin/oras"),
    )
    .args([
        "login",
        &host,
        "-u",
        "ci",
        "-p",
        "s3cret-pass",
        "--ca-file",
        &ca,
    ])
    .env("DOCKER_CONFIG", docker.path())
    .output()
    .unwrap();
    assert!(login.status.success(), "{}", text(&login));
    let reference = format!("oci://{host}/private/hello:1");
    let out = crate::common::wasmgate()
        .env("DOCKER_CONFIG", docker.path())
        .env("WASMGATE_CACHE_DIR", tempfile::tempdir().unwrap().path())
        .args([
            "call",
            &reference,
            "hello",
            "--input",
            "docker",
            "--registry-ca-file",
            &ca,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"message":"Hello docker"}"#
    );

    // The token flow: the registry challenges with a token service, which
    // hands a token to the right password only.
    let tokens = TokenService::start("puller", "token-pass");
    let token_registry = RegistryServer::start_with(RegistryOptions {
        auth: RegistryAuth::Token(tokens),
        tls: None,
    });
    let token_host = token_registry.host();
    token_registry.push_wasm("t/hello:1", &plugin("hello"), WASM_ARTIFACT, "t");
    let reference = format!("oci://{token_host}/t/hello:1");
    let call = |password: &str| {
        crate::common::wasmgate()
            .env("WASMGATE_CACHE_DIR", tempfile::tempdir().unwrap().path())
            .env("WASMGATE_REGISTRY_USERNAME", "puller")
            .env("WASMGATE_REGISTRY_PASSWORD", password)
            .args([
                "call",
                &reference,
                "hello",
                "--input",
                "token",
                "--plain-http",
            ])
            .output()
            .unwrap()
    };
    let out = call("wrong");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("the registry refused"),
        "{}",
        text(&out)
    );
    let out = call("token-pass");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"message":"Hello token"}"#
    );
}

/// Three nodes on etcd: `config push` publishes a tag pinned to the digest
/// it resolved to, so a node that starts after the tag moved still runs the
/// pushed bytes; an admin write through a node is pinned the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_run_the_pushed_digest_even_after_the_tag_moves() {
    let registry = RegistryServer::start();
    let host = registry.host();
    let etcd = EtcdServer::start();
    let v1 = registry.push_wasm("fn/greeter:prod", &plugin("hello"), WASM_ARTIFACT, "v1");
    let node = |name: &str| {
        let cache = tempfile::tempdir().unwrap().keep();
        GatewayProc::start_with(
            &format!(
                "listen: \"{{listen}}\"\nadmin: \"{{admin}}\"\nconfig: {{etcd: [\"{}\"], node_name: {name}}}\n",
                etcd.url()
            ),
            &["--cache-dir", cache.to_str().unwrap()],
        )
    };
    let (a, b) = (node("a"), node("b"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(
        &file,
        format!(
            r#"
plugins:
  - {{name: greeter, wasm: "oci://{host}/fn/greeter:prod", registry: {{plain_http: true}}}}
routes:
  - {{name: fn, path: {{prefix: /fn/}}, function: {{plugin: greeter}}}}
"#
        ),
    )
    .unwrap();
    let pushed = wasmgate(
        dir.path(),
        &[
            "config",
            "push",
            "-c",
            file.to_str().unwrap(),
            "--etcd",
            &etcd.url(),
        ],
    );
    assert!(pushed.status.success(), "{}", text(&pushed));
    let stored = etcd.etcdctl(&["get", "--prefix", "/wasmgate/plugins/"]);
    assert!(
        stored.contains(&format!("fn/greeter:prod@{v1}")),
        "{stored}"
    );

    // The tag moves; a third node starts after that.
    registry.push_wasm(
        "fn/greeter:prod",
        &plugin("count_vowels"),
        WASM_ARTIFACT,
        "v2",
    );
    let cnode = node("c");
    let c = client();
    for gw in [&a, &b, &cnode] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let reply = send(&c, "POST", &gw.url("/fn/hello"), &[], "cluster").await;
            if reply.text() == r#"{"message":"Hello cluster"}"# {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{}", reply.text());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(
            plugin_status(&c, gw, "greeter").await["image"],
            format!("oci://{host}/fn/greeter:prod@{v1}")
        );
    }

    // An admin write of the tag through one node publishes it pinned to
    // what the tag points to now, and every node runs that.
    let body = format!(
        r#"{{"wasm": "oci://{host}/fn/greeter:prod", "pull": "always", "registry": {{"plain_http": true}}}}"#
    );
    let put = admin(&c, &a, "PUT", "/plugins/greeter", &body).await;
    assert!(put.status < 300, "{}", put.text());
    let shown = admin(&c, &a, "GET", "/plugins/greeter", "").await;
    let wasm = shown.json()["wasm"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        wasm.starts_with(&format!("oci://{host}/fn/greeter:prod@sha256:")),
        "{}",
        shown.text()
    );
    assert!(!wasm.ends_with(&v1), "{wasm}");
    for gw in [&a, &b, &cnode] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let reply = send(&c, "POST", &gw.url("/fn/count_vowels"), &[], "oci").await;
            if reply.status == 200 {
                assert_eq!(reply.json()["count"], 2);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{}", reply.text());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(plugin_status(&c, gw, "greeter").await["image"], wasm);
    }
}

/// A body of 1 MiB chunks of spaces, for ever, with no length.
struct Endless;

impl hyper::body::Body for Endless {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let chunk = bytes::Bytes::from(vec![b' '; 1 << 20]);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))))
    }
}

/// A registry that misbehaves with its manifests, served in-process: the
/// manifest of `big` is endless (sent in chunks, no length), and that of
/// `moved` redirects to another host.
async fn misbehaving_registry(other_host: String) -> (u16, tokio::task::JoinHandle<()>) {
    use http_body_util::{BodyExt, Full};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let other_host = other_host.clone();
            let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                let path = request.uri().path().to_string();
                let other_host = other_host.clone();
                async move {
                    let response = hyper::Response::builder();
                    let digest = format!("sha256:{}", "0".repeat(64));
                    let response = if path.starts_with("/v2/big/manifests/") {
                        response
                            .header("docker-content-digest", digest)
                            .body(Endless.boxed())
                    } else if path.starts_with("/v2/moved/manifests/") {
                        response
                            .status(307)
                            .header("location", format!("http://{other_host}{path}"))
                            .body(
                                Full::new(bytes::Bytes::new())
                                    .map_err(|e| match e {})
                                    .boxed(),
                            )
                    } else {
                        // `/v2/`: no authentication needed.
                        response.body(
                            Full::new(bytes::Bytes::new())
                                .map_err(|e| match e {})
                                .boxed(),
                        )
                    };
                    Ok::<_, std::convert::Infallible>(response.unwrap())
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (port, task)
}

/// A manifest is read up to 4 MiB, and only from the registry itself: a
/// redirect to another host is refused before that host is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_are_capped_and_never_fetched_from_another_host() {
    let elsewhere = crate::common::upstream::Upstream::start("elsewhere").await;
    let (port, _registry) = misbehaving_registry(elsewhere.address()).await;
    let cache = tempfile::tempdir().unwrap();
    let pull = |name: &str| {
        let cache = cache.path().to_path_buf();
        let reference = format!("oci://127.0.0.1:{port}/{name}:1");
        tokio::task::spawn_blocking(move || {
            wasmgate(
                &cache,
                &["call", &reference, "hello", "--plain-http", "--input", "x"],
            )
        })
    };
    let out = pull("big").await.unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("larger than the limit of 4194304 bytes"),
        "{}",
        text(&out)
    );
    let out = pull("moved").await.unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("another host: refused"),
        "{}",
        text(&out)
    );
    assert_eq!(
        elsewhere.hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the other host was asked"
    );
}
