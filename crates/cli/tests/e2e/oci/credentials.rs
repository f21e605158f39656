//! Registry credentials: from the configuration, the environment and
//! Docker's config.json, a token service's flow, and a registry over TLS.

use super::{text, WASM_ARTIFACT};
use crate::common::gateway::{admin, send, GatewayProc};
use crate::common::{client, plugin};
use std::path::Path;
use wasmgate_testkit::{RegistryAuth, RegistryOptions, RegistryServer, TokenService};

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
