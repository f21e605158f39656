//! Pulls that must fail, with the running version serving on: a bad pull
//! with its reason, a precompiled module, and a misbehaving registry's
//! endless or foreign manifests.

use super::{text, wasmgate, WASM_ARTIFACT};
use crate::common::gateway::{admin, send, GatewayProc};
use crate::common::{client, plugin};
use wasmgate_testkit::RegistryServer;

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
