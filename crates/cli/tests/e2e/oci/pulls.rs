//! Pulls that work: `call`, `serve` and `compile` by tag and digest in every
//! layout, a gateway serving every plugin kind and following a moved tag,
//! and cluster nodes keeping the pushed digest after the tag moves.

use super::{plugin_status, text, wasmgate, COMPAT_LAYER, WASM_ARTIFACT};
use crate::common::gateway::{admin, send, GatewayProc};
use crate::common::{client, plugin, Server};
use wasmgate_testkit::{EtcdServer, RegistryServer};

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
