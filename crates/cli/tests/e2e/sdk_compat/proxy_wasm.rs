//! Proxy-Wasm filters from the AssemblyScript and C++ SDKs (`as_filters`,
//! `cpp_filters`) through `wasmgate run`, each test an `_assemblyscript_sdk`
//! and a `_cpp_sdk` twin: loading, headers and logs, local replies, bodies,
//! shared data, HTTP calls and ticks.

use crate::common::gateway::{get, send, until_header_grows, with_upstream};
use crate::common::upstream::Upstream;
use crate::common::{client, wait_for_log, wasmgate};
use std::time::Duration;

/// One Proxy-Wasm SDK's module.
#[derive(Clone, Copy)]
struct Sdk {
    /// The module in target/wasm.
    module: &'static str,
    /// What its filters put in x-sdk, x-local-reply and log lines.
    name: &'static str,
    /// Its ABI version, as `wasmgate check` reports it.
    abi: &'static str,
}

const AS: Sdk = Sdk {
    module: "as_filters",
    name: "assemblyscript",
    abi: "0.2.0",
};

const CPP: Sdk = Sdk {
    module: "cpp_filters",
    name: "cpp",
    abi: "0.2.1",
};

/// `wasmgate check` on `yaml`: (exit code, stdout, stderr).
fn check(yaml: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, crate::common::gateway::render(yaml, 1, 2)).unwrap();
    let out = wasmgate()
        .args(["check", "-c"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------
// Loading: every root id starts, and no import is left unimplemented.

#[test]
fn filters_load_with_every_root_id_assemblyscript_sdk() {
    filters_load_with_every_root_id(AS);
}

#[test]
fn filters_load_with_every_root_id_cpp_sdk() {
    filters_load_with_every_root_id(CPP);
}

fn filters_load_with_every_root_id(sdk: Sdk) {
    let m = sdk.module;
    let yaml = format!(
        r#"
plugins:
  - {{name: add_header, wasm: "{{wasm:{m}}}", root_id: add_header, memory_limit_mb: 8}}
  - {{name: local_reply, wasm: "{{wasm:{m}}}", root_id: local_reply, memory_limit_mb: 8}}
  - {{name: body, wasm: "{{wasm:{m}}}", root_id: body, memory_limit_mb: 8}}
  - {{name: shared_data, wasm: "{{wasm:{m}}}", root_id: shared_data, memory_limit_mb: 8}}
  - {{name: http_call, wasm: "{{wasm:{m}}}", root_id: http_call, memory_limit_mb: 8}}
  - {{name: tick, wasm: "{{wasm:{m}}}", root_id: tick, memory_limit_mb: 8}}
routes:
  - name: all
    plugins:
      - {{plugin: add_header}}
      - {{plugin: local_reply, conf: "/x 404 none"}}
      - {{plugin: body}}
      - {{plugin: shared_data}}
      - {{plugin: http_call}}
      - {{plugin: tick}}
    respond: {{}}
"#
    );
    // --strict: fails if the module imports a host function wasmgate lacks.
    let (code, stdout, stderr) = check(&yaml, &["--strict"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for name in [
        "add_header",
        "local_reply",
        "body",
        "shared_data",
        "http_call",
        "tick",
    ] {
        let line = format!("plugin {name}: proxy-wasm {}", sdk.abi);
        assert!(stdout.contains(&line), "{line:?} in {stdout}");
    }
    // A configuration the filter refuses (proxy_on_configure returns false).
    let refused = yaml.replace("/x 404 none", "no status here");
    let (code, _, stderr) = check(&refused, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("proxy_on_configure returned false"),
        "{stderr}"
    );
}

/// A root id the module has no filter for: the AssemblyScript SDK aborts,
/// which is WASI `proc_exit(255)`; the error says so in those terms.
#[test]
fn an_assemblyscript_abort_is_reported_as_the_plugins_exit() {
    let m = AS.module;
    let yaml = format!(
        r#"
plugins:
  - {{name: nobody, wasm: "{{wasm:{m}}}", root_id: nobody}}
routes:
  - {{name: all, plugins: [{{plugin: nobody}}], respond: {{}}}}
"#
    );
    let (code, _, stderr) = check(&yaml, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the plugin exited with status 255 (WASI proc_exit)"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------
// Headers, plugin configuration, properties and logging (add_header.wasm's
// contract, as in routes_match_and_header_filters_edit_both_directions).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_config_and_logs_assemblyscript_sdk() {
    headers_config_and_logs(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_config_and_logs_cpp_sdk() {
    headers_config_and_logs(CPP).await;
}

async fn headers_config_and_logs(sdk: Sdk) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: header, wasm: "{{wasm:{m}}}", root_id: add_header, memory_limit_mb: 8}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes:
  - {{name: configured, path: {{prefix: /users/}}, plugins: [{{plugin: header, conf: {n}-conf}}], upstream: backend}}
  - {{name: bare, plugins: [{{plugin: header}}], upstream: backend}}
"#,
            m = sdk.module,
            n = sdk.name,
        ),
    )
    .await;
    let c = client();
    let reply = get(&c, &gw.url("/users/42?x=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    // The request header carries the route's configuration to the upstream.
    assert_eq!(echo["path"], "/users/42?x=1");
    assert_eq!(
        echo["headers"]["x-wasmgate-filter"],
        format!("{}-conf", sdk.name)
    );
    // Response headers: the request's :path, property request.host.
    assert_eq!(reply.header("x-seen-path"), Some("/users/42?x=1"));
    let host = format!("127.0.0.1:{}", gw.port);
    assert_eq!(reply.header("x-seen-host"), Some(host.as_str()));
    assert_eq!(reply.header("x-sdk"), Some(sdk.name));
    assert_eq!(reply.header("x-upstream"), Some("backend"));
    // Without a configuration: "on".
    let reply = send(&c, "POST", &gw.url("/plain"), &[], "payload").await;
    assert_eq!(reply.json()["headers"]["x-wasmgate-filter"], "on");
    assert_eq!(reply.json()["body"], "payload");
    assert_eq!(reply.header("x-seen-path"), Some("/plain"));
    // proxy_log from onLog, with the plugin's and route's names.
    let logs = wait_for_log(|| gw.logs(), &format!("{} add_header: #", sdk.name));
    let line = logs
        .lines()
        .find(|l| l.contains("done with /users/42?x=1"))
        .unwrap_or_else(|| panic!("no onLog line for /users/42 in:\n{logs}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("plugin=header") && line.contains("route=configured"),
        "{line}"
    );
    wait_for_log(|| gw.logs(), "done with /plain");
}

// ---------------------------------------------------------------------------
// Local replies (as fault_injection_answers_locally_and_skips_the_upstream).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_reply_ends_the_chain_assemblyscript_sdk() {
    local_reply_ends_the_chain(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_reply_ends_the_chain_cpp_sdk() {
    local_reply_ends_the_chain(CPP).await;
}

async fn local_reply_ends_the_chain(sdk: Sdk) {
    let (up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: reply, wasm: "{{wasm:{m}}}", root_id: local_reply, memory_limit_mb: 8}}
  - {{name: header, wasm: "{{wasm:{m}}}", root_id: add_header, memory_limit_mb: 8}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes:
  - name: all
    plugins:
      - {{plugin: reply, conf: "/teapot 418 short and stout"}}
      - {{plugin: header}}
    upstream: backend
"#,
            m = sdk.module,
        ),
    )
    .await;
    let c = client();
    for path in ["/teapot", "/teapot/pot?x=1", "/teapot"] {
        let reply = get(&c, &gw.url(path)).await;
        assert_eq!(reply.status, 418, "{path}: {}", reply.text());
        assert_eq!(reply.text(), "short and stout");
        assert_eq!(reply.header("x-local-reply"), Some(sdk.name));
        // The chain ended at the local response: the next filter never ran.
        assert_eq!(reply.header("x-seen-path"), None);
    }
    assert_eq!(up.hits(), 0, "a local response skips the upstream");
    // Other paths go on through the chain to the upstream.
    let reply = get(&c, &gw.url("/coffee")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-seen-path"), Some("/coffee"));
    assert_eq!(reply.header("x-local-reply"), None);
    assert_eq!(up.hits(), 1);
}

// ---------------------------------------------------------------------------
// Bodies (as http_body_rewrites_buffered_bodies_and_streams_the_rest).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_is_read_and_rewritten_assemblyscript_sdk() {
    body_is_read_and_rewritten(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_is_read_and_rewritten_cpp_sdk() {
    body_is_read_and_rewritten(CPP).await;
}

async fn body_is_read_and_rewritten(sdk: Sdk) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: body, wasm: "{{wasm:{m}}}", root_id: body, memory_limit_mb: 8}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes: [{{name: all, plugins: [{{plugin: body}}], upstream: backend}}]
"#,
            m = sdk.module,
        ),
    )
    .await;
    let c = client();
    // Response bodies.
    let reply = get(&c, &gw.url("/secret")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "Original message body (24 bytes) redacted.\n");
    // Request bodies: the filter saw the whole body, the upstream the rewrite.
    let reply = send(&c, "POST", &gw.url("/echo"), &[], "my secret password").await;
    assert_eq!(reply.json()["body"], "redacted");
    assert_eq!(reply.header("x-request-body-bytes"), Some("18"));
    let reply = send(&c, "POST", &gw.url("/echo"), &[], "nothing to hide").await;
    assert_eq!(reply.json()["body"], "nothing to hide");
    assert_eq!(reply.header("x-request-body-bytes"), Some("15"));
    // A body larger than the module's memory at start: the guest allocator
    // grows it (emscripten tells the host through
    // emscripten_notify_memory_growth; AssemblyScript's runtime does not).
    let big = "a".repeat(600_000);
    let reply = send(&c, "POST", &gw.url("/echo"), &[], big.clone()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["body"].as_str().unwrap().len(), 600_000);
    assert_eq!(reply.header("x-request-body-bytes"), Some("600000"));
    let reply = send(&c, "POST", &gw.url("/echo"), &[], big + "secret").await;
    assert_eq!(reply.json()["body"], "redacted");
    // A streamed body (3 chunks over 200 ms) arrives whole and unchanged.
    let reply = get(&c, &gw.url("/stream")).await;
    assert_eq!(reply.text(), "chunk-0\nchunk-1\nchunk-2\n");
}

// ---------------------------------------------------------------------------
// Shared data (as shared_data_counts_across_instances): compare-and-swap
// increments from many instances at once, none lost, none repeated.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_data_counts_across_instances_assemblyscript_sdk() {
    shared_data_counts_across_instances(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_data_counts_across_instances_cpp_sdk() {
    shared_data_counts_across_instances(CPP).await;
}

async fn shared_data_counts_across_instances(sdk: Sdk) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: state, wasm: "{{wasm:{m}}}", root_id: shared_data, memory_limit_mb: 8, pool_size: 8}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes: [{{name: all, plugins: [{{plugin: state}}], upstream: backend}}]
"#,
            m = sdk.module,
        ),
    )
    .await;
    let c = client();
    let requests: Vec<_> = (0..40)
        .map(|_| {
            let c = c.clone();
            let url = gw.url("/");
            tokio::spawn(async move { get(&c, &url).await })
        })
        .collect();
    let mut hits = Vec::new();
    for r in requests {
        hits.push(r.await.unwrap().number("x-hits"));
    }
    hits.sort();
    assert_eq!(hits, (1..=40).collect::<Vec<u64>>());
    // And the next request reads back what the others wrote.
    assert_eq!(get(&c, &gw.url("/")).await.number("x-hits"), 41);
}

// ---------------------------------------------------------------------------
// HTTP calls (as http_auth_random_calls_out_then_continues_or_forbids).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_call_continues_or_forbids_assemblyscript_sdk() {
    http_call_continues_or_forbids(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_call_continues_or_forbids_cpp_sdk() {
    http_call_continues_or_forbids(CPP).await;
}

async fn http_call_continues_or_forbids(sdk: Sdk) {
    let backend = Upstream::start("backend").await;
    let (auth, gw) = with_upstream(
        "auth",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: auth, wasm: "{{wasm:{m}}}", root_id: http_call, memory_limit_mb: 8}}
upstreams:
  - {{name: backend, nodes: [{{address: "{backend}"}}]}}
  - {{name: auth-service, nodes: [{{address: "{{backend}}"}}]}}
  - {{name: dead-auth, nodes: [{{address: "127.0.0.1:1"}}]}}
routes:
  - {{name: dead, path: {{prefix: /dead}}, plugins: [{{plugin: auth, conf: dead-auth}}], upstream: backend}}
  - {{name: broken, path: {{prefix: /broken}}, plugins: [{{plugin: auth, conf: no-such-upstream}}], upstream: backend}}
  - {{name: all, plugins: [{{plugin: auth, conf: auth-service}}], upstream: backend}}
"#,
            m = sdk.module,
            backend = backend.address(),
        ),
    )
    .await;
    let c = client();
    // The callout's answer decides, and is reflected in the request.
    let allowed = send(&c, "GET", &gw.url("/data"), &[("x-token", "allow")], "").await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(allowed.json()["headers"]["x-auth"], "allowed");
    assert_eq!(allowed.json()["headers"]["x-auth-status"], "200");
    let denied = send(&c, "GET", &gw.url("/data"), &[("x-token", "nope")], "").await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.text(), "Access forbidden.\n");
    assert_eq!(denied.header("x-auth"), Some("denied"));
    assert_eq!(denied.header("x-auth-status"), Some("200"));
    assert_eq!(auth.hits(), 2, "one callout per request");
    // A callout to a dead service is answered empty: denied.
    let dead = get(&c, &gw.url("/dead")).await;
    assert_eq!(dead.status, 403, "{}", dead.text());
    assert_eq!(dead.header("x-auth"), Some("denied"));
    assert_eq!(dead.header("x-auth-status"), None);
    assert_eq!(backend.hits(), 1, "only the allowed request went upstream");
    // Dispatching to an unknown upstream fails at once (BadArgument): 503.
    let broken = get(&c, &gw.url("/broken")).await;
    assert_eq!(broken.status, 503);
    assert_eq!(broken.text(), "auth upstream unavailable\n");
    wait_for_log(
        || gw.logs(),
        "http_call: dispatch to no-such-upstream failed",
    );
    // Concurrent paused requests, each resumed by its own callout's answer.
    let requests: Vec<_> = (0..30)
        .map(|i| {
            let c = c.clone();
            let url = gw.url(&format!("/n/{i}"));
            let token = if i % 3 == 0 { "nope" } else { "allow" };
            tokio::spawn(async move { (i, send(&c, "GET", &url, &[("x-token", token)], "").await) })
        })
        .collect();
    for r in requests {
        let (i, reply) = r.await.unwrap();
        if i % 3 == 0 {
            assert_eq!(reply.status, 403, "request {i}");
        } else {
            assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
            assert_eq!(reply.json()["path"], format!("/n/{i}"));
        }
    }
}

// ---------------------------------------------------------------------------
// Ticks (as ticks_shared_queue_and_metrics): the root context's 50 ms timer
// keeps counting in shared data.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_keep_counting_assemblyscript_sdk() {
    ticks_keep_counting(AS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_keep_counting_cpp_sdk() {
    ticks_keep_counting(CPP).await;
}

async fn ticks_keep_counting(sdk: Sdk) {
    let (_up, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
plugins:
  - {{name: tick, wasm: "{{wasm:{m}}}", root_id: tick, memory_limit_mb: 8}}
upstreams: [{{name: backend, nodes: [{{address: "{{backend}}"}}]}}]
routes: [{{name: tick, plugins: [{{plugin: tick}}], upstream: backend}}]
"#,
            m = sdk.module,
        ),
    )
    .await;
    let c = client();
    // Five more ticks of a 50 ms timer take 250 ms: 2 s is room for a busy
    // machine, and too short for a timer that fires at a tenth of its rate.
    until_header_grows(&c, &gw.url("/tick"), "x-ticks", 5, Duration::from_secs(2)).await;
}
