//! `wasi:http` components (crates/component) from outside: built from source
//! in Rust (wasip2), Python (componentize-py) and JavaScript (ComponentizeJS)
//! by plugins/build.sh, served by `wasmgate serve` and by a gateway route
//! behind Proxy-Wasm filters. The three share one path contract
//! (plugins/component/rust/http_handler/src/lib.rs).

use std::time::{Duration, Instant};

use crate::common::gateway::{get, metric, send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient, Server};

/// 10 MiB of bytes that do not repeat: an echo that loses or reorders a
/// chunk cannot come back equal.
fn big_body() -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..10 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Whether an error text names the `wasi:http` error code `code` (e.g.
/// `HTTP-request-denied`) as any of the languages prints it
/// (`ErrorCode::HttpRequestDenied`, `ErrorCode_HttpRequestDenied()`,
/// `{"tag":"HTTP-request-denied"}`).
fn names_error_code(text: &str, code: &str) -> bool {
    let fold = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    };
    fold(text).contains(&fold(code))
}

/// Everything the contract promises, through `wasmgate serve`.
async fn serve_contract(lang: &str) {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("f.txt"), "file for the guest\n").unwrap();
    let upstream = Upstream::start("outside").await;
    let plugin = crate::common::plugin(&format!("component_{lang}"));
    let read_only = format!("ro:{}:/data", files.path().display());
    let server = Server::start(&[
        plugin.to_str().unwrap(),
        "--allow-host",
        "127.0.0.1",
        "--allow-path",
        &read_only,
        "--env",
        "GREETING=hello from the host",
        // Long enough for a 10 MiB echo through CPython on a busy machine
        // (at 2 s a run beside a cold compile once cut it short); `/loop`
        // meets it.
        "--timeout-ms",
        "5000",
        "--memory-limit",
        "96",
        "--access-log",
        "off",
    ]);
    let c = client();
    let reply = get(&c, &server.url("/")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), format!("hello from {lang} component"));
    assert_eq!(
        reply.header("content-type").unwrap(),
        "text/plain",
        "the guest's own header"
    );
    // A fresh instance per request: module state never carries over.
    for _ in 0..3 {
        assert_eq!(get(&c, &server.url("/state")).await.text(), "1");
    }
    // Environment and directories: what the flags grant, nothing else.
    let reply = get(&c, &server.url("/env?name=GREETING")).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (200, "hello from the host")
    );
    assert_eq!(get(&c, &server.url("/env?name=HOME")).await.status, 404);
    let reply = get(&c, &server.url("/file?path=/data/f.txt")).await;
    assert_eq!(reply.text(), "file for the guest\n");
    assert_ne!(
        get(&c, &server.url("/file?path=/etc/passwd")).await.status,
        200
    );
    // 10 MiB streamed in and back out, unchanged.
    let body = big_body();
    let reply = send(&c, "POST", &server.url("/echo"), &[], body.clone()).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.body == body,
        "the echo differs ({} bytes back)",
        reply.body.len()
    );
    // Outgoing requests: an allowed host is reached through the host's
    // client, a host not on the list is an error the guest sees at once.
    let allowed = format!("http://{}/from-{lang}", upstream.address());
    let reply = get(&c, &server.url(&format!("/fetch?url={}", encode(&allowed)))).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().starts_with("upstream 200\n"),
        "{}",
        reply.text()
    );
    assert_eq!(upstream.received(&format!("/from-{lang}")).len(), 1);
    let denied = format!(
        "http://localhost:{}/",
        upstream.address().rsplit(':').next().unwrap()
    );
    let started = Instant::now();
    let reply = get(&c, &server.url(&format!("/fetch?url={}", encode(&denied)))).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(
        reply.text().starts_with("outgoing error:"),
        "{}",
        reply.text()
    );
    assert!(
        names_error_code(&reply.text(), "HTTP-request-denied"),
        "{}",
        reply.text()
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a denied host is no hang"
    );
    // An allowed host that is down: the guest hears why, at once.
    let dead = format!("http://127.0.0.1:{}/", crate::common::free_port());
    let reply = get(&c, &server.url(&format!("/fetch?url={}", encode(&dead)))).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(
        names_error_code(&reply.text(), "connection-refused"),
        "{}",
        reply.text()
    );
    // Failures end only their own request, each as what it is.
    let reply = get(&c, &server.url("/trap")).await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert_eq!(reply.json()["error"]["kind"], "trap", "{}", reply.text());
    assert!(reply.json()["error"]["backtrace"]
        .as_array()
        .is_some_and(|f| !f.is_empty()));
    let started = Instant::now();
    let reply = get(&c, &server.url("/loop")).await;
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(reply.json()["error"]["kind"], "timeout");
    // The call's deadline (5 s) and no more than a moment beyond.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let reply = get(&c, &server.url("/grow")).await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert_eq!(
        reply.json()["error"]["kind"],
        "out_of_memory",
        "{}",
        reply.text()
    );
    let reply = get(&c, &server.url("/")).await;
    assert_eq!(reply.status, 200, "still serving after the failures");
}

fn encode(url: &str) -> String {
    url.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_rust_component() {
    serve_contract("rust").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_python_component() {
    serve_contract("python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_javascript_component() {
    serve_contract("js").await;
}

/// A Rust crash report names the guest's source line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_is_reported_with_file_and_line() {
    let plugin = crate::common::plugin("component_rust");
    let server = Server::start(&[plugin.to_str().unwrap(), "--access-log", "off"]);
    let reply = get(&client(), &server.url("/trap")).await;
    let frames = reply.json()["error"]["backtrace"].clone();
    let handler = frames
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("http_handler/src/lib.rs"))
        })
        .unwrap_or_else(|| panic!("no frame in the component's source: {frames}"));
    assert!(handler["line"].as_u64().is_some(), "{handler}");
}

/// Flags that only mean something to Extism plugins are refused, not ignored.
#[test]
fn serve_refuses_extism_only_flags_for_a_component() {
    let plugin = crate::common::plugin("component_rust");
    let output = crate::common::wasmgate()
        .args(["serve", plugin.to_str().unwrap(), "--config", "k=v"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--config is for Extism plugins"),
        "{stderr}"
    );
    let output = crate::common::wasmgate()
        .args(["serve", plugin.to_str().unwrap(), "hello"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("answers every path itself"), "{stderr}");
}

const GATEWAY: &str = r#"
listen: "{listen}"
admin: "{admin}"
plugins:
  - {name: h, wasm: "{wasm:add_header}"}
  - {name: fault, wasm: "{wasm:fault_injection}"}
  - name: handler
    wasm: "{wasm:component_rust}"
    env: {GREETING: first}
    allowed_hosts: ["127.0.0.1"]
    timeout_ms: 1000
    memory_limit_mb: 64
  - {name: py, wasm: "{wasm:component_python}"}
routes:
  - name: filtered
    headers: {x-route: filtered}
    plugins: [{plugin: h, conf: from-the-filter}]
    component: {plugin: handler}
  - name: refused
    headers: {x-route: refused}
    plugins: [{plugin: fault, conf: {body: "refused by a filter", http_status: 403}}]
    component: {plugin: handler}
  - name: python
    headers: {x-route: python}
    plugins: [{plugin: h, conf: python}]
    component: {plugin: py}
  - name: direct
    component: {plugin: handler}
"#;

/// A GET on route `route` (by its `x-route` header).
async fn on_route(
    c: &HttpClient,
    gw: &GatewayProc,
    route: &str,
    path: &str,
) -> crate::common::Reply {
    send(c, "GET", &gw.url(path), &[("x-route", route)], "").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_route_ends_in_a_component_behind_filters() {
    let mut gw = GatewayProc::start(GATEWAY);
    let c = client();
    // Unfiltered: the component answers every path itself.
    let reply = get(&c, &gw.url("/")).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (200, "hello from rust component")
    );
    let reply = get(&c, &gw.url("/header?name=x-wasmgate-filter")).await;
    assert_eq!(reply.status, 404, "no filter on the direct route");
    // Filtered: the filter's request header reaches the component, its
    // response header reaches the client. In Python too.
    for (route, conf) in [("filtered", "from-the-filter"), ("python", "python")] {
        let reply = on_route(&c, &gw, route, "/header?name=x-wasmgate-filter").await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (200, conf),
            "{route}"
        );
        assert_eq!(
            reply.header("x-seen-path"),
            Some("/header?name=x-wasmgate-filter")
        );
        // The component sees the client as an upstream would.
        let reply = on_route(&c, &gw, route, "/header?name=x-forwarded-for").await;
        assert_eq!(reply.text(), "127.0.0.1", "{route}");
    }
    // An answer the component wrote whole is filtered whole (its end is
    // seen behind its first frame), so it goes out with its length.
    let reply = on_route(&c, &gw, "filtered", "/").await;
    assert_eq!(reply.text(), "hello from rust component");
    assert_eq!(reply.header("content-length"), Some("25"));
    // A filter's local answer: the component never runs.
    let calls = "wasmgate_plugin_call_seconds_count{plugin=\"handler\",route=\"\"}";
    let calls_before = metric(&c, &gw, calls).await;
    let reply = on_route(&c, &gw, "refused", "/").await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (403, "refused by a filter")
    );
    assert_eq!(
        metric(&c, &gw, calls).await,
        calls_before,
        "never reached the component"
    );
    // 10 MiB streamed through a filter into the component and back.
    let body = big_body();
    let headers = [("x-route", "filtered")];
    let reply = send(&c, "POST", &gw.url("/echo"), &headers, body.clone()).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.body == body,
        "the echo differs ({} bytes)",
        reply.body.len()
    );
    // Crashes: the component's own failure, the gateway serving on.
    let reply = get(&c, &gw.url("/loop")).await;
    assert_eq!(reply.status, 504, "{}", reply.text());
    let timeouts = "wasmgate_plugin_failures_total{plugin=\"handler\",route=\"\",kind=\"timeout\"}";
    assert_eq!(metric(&c, &gw, timeouts).await, 1.0);
    let status = get(&c, &gw.admin_url("/plugins/handler/status"))
        .await
        .json();
    assert_eq!(status["kind"], "component (wasi:http)", "{status}");
    let set = &status["instance_sets"][0];
    assert_eq!(set["last_crash"]["report"]["kind"], "timeout", "{status}");
    assert_eq!(set["pool"]["in_use"], 0, "{status}");
    assert_eq!(get(&c, &gw.url("/env?name=GREETING")).await.text(), "first");
    // Hot reload: the new environment is the next request's.
    gw.rewrite(&GATEWAY.replace("GREETING: first", "GREETING: second"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&c, &gw.url("/env?name=GREETING")).await.text() != "second" {
        assert!(
            Instant::now() < deadline,
            "the reload never took: {}",
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gw.terminate().code(), Some(0));
}

/// A component is a route's endpoint, never a filter nor a function.
#[test]
fn check_says_where_a_component_goes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wasmgate.yaml");
    let yaml = crate::common::gateway::render(
        r#"
listen: "{listen}"
plugins: [{name: handler, wasm: "{wasm:component_rust}"}]
routes:
  - {name: as-filter, path: {prefix: /a}, plugins: [{plugin: handler}], respond: {}}
  - {name: as-function, path: {prefix: /b}, function: {plugin: handler}}
"#,
        crate::common::free_port(),
        crate::common::free_port(),
    );
    std::fs::write(&config, yaml).unwrap();
    let output = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("use it as a route's `component`"), "{text}");
    assert!(
        text.contains("is a wasi:http component, not an Extism plugin"),
        "{text}"
    );
}

/// A component that is not a `wasi:http` handler, or not a component at
/// all past its header, is refused with the reason, not served.
#[test]
fn serve_refuses_what_is_not_a_wasi_http_component() {
    let dir = tempfile::tempdir().unwrap();
    // The smallest valid component: its header and nothing else.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\x00\x01\x00").unwrap();
    let truncated = dir.path().join("truncated.wasm");
    let real = std::fs::read(crate::common::plugin("component_rust")).unwrap();
    std::fs::write(&truncated, &real[..real.len() / 2]).unwrap();
    for (file, says) in [
        (&empty, "does not export wasi:http/incoming-handler"),
        (&truncated, "invalid WebAssembly component"),
    ] {
        let output = crate::common::wasmgate()
            .args(["serve", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{}: {stderr}", file.display());
    }
}

/// `wasmgate compile` makes a component's artifact too; `serve` runs it
/// only when told it may load native code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_precompiled_component_serves_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let artifact = dir.path().join("handler.cwasm");
    let plugin = crate::common::plugin("component_rust");
    let compiled = crate::common::wasmgate()
        .args(["compile", plugin.to_str().unwrap(), "-o"])
        .arg(&artifact)
        .output()
        .unwrap();
    assert!(compiled.status.success(), "{compiled:?}");
    let refused = crate::common::wasmgate()
        .args(["serve", artifact.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("allow-precompiled"), "{stderr}");
    let server = Server::start(&[
        artifact.to_str().unwrap(),
        "--allow-precompiled",
        "--access-log",
        "off",
    ]);
    let reply = get(&client(), &server.url("/")).await;
    assert_eq!(reply.text(), "hello from rust component");
}

/// A node with a route to a Python component (19 MB of CPython) compiling
/// from nothing: it serves its other routes at once and answers the
/// component's 503 `plugin_starting` meanwhile, as /readyz, /status and
/// /metrics say; once compiled it reloads and serves it. A reload that
/// replaces the component keeps the version before serving while the new
/// one compiles: no request meets a 503 (docs/gateway.md, "Components
/// that compile in the background").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_component_compiles_in_the_background_while_the_rest_serves() {
    let cache = tempfile::tempdir().unwrap();
    let config = |component: &str, wait_ms: u64| {
        format!(
            "listen: \"{{listen}}\"\nadmin: \"{{admin}}\"\nlimits: {{component_compile_wait_ms: {wait_ms}}}\nplugins:\n  - {{name: py, wasm: \"{{wasm:{component}}}\"}}\nroutes:\n  - {{name: plain, path: {{prefix: /plain}}, respond: {{body: here}}}}\n  - {{name: app, component: {{plugin: py}}}}\n"
        )
    };
    // A node stopped while the compile runs exits at once: the compile
    // left in the background does not hold a SIGTERM (it would for seconds
    // to minutes). Nothing of it reaches the cache: the node below compiles
    // from nothing.
    let mut stopped = GatewayProc::start_compiling(
        &config("component_python", 100),
        &["--cache-dir", cache.path().to_str().unwrap()],
        &[],
    );
    let c = client();
    let plain = get(&c, &stopped.url("/plain")).await;
    assert_eq!(plain.status, 200);
    let asked = Instant::now();
    assert!(stopped.terminate().success());
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "SIGTERM waited {:?} for the compile",
        asked.elapsed()
    );
    let gw = GatewayProc::start_compiling(
        &config("component_python", 100),
        &["--cache-dir", cache.path().to_str().unwrap()],
        &[],
    );
    let plain = get(&c, &gw.url("/plain")).await;
    assert_eq!((plain.status, plain.text().as_str()), (200, "here"));
    let starting = get(&c, &gw.url("/")).await;
    assert_eq!(starting.status, 503, "{}", starting.text());
    assert_eq!(starting.json()["error"]["kind"], "plugin_starting");
    assert_eq!(starting.header("retry-after"), Some("2"));
    let ready = get(&c, &gw.admin_url("/readyz")).await;
    assert_eq!(ready.status, 503);
    assert!(ready.text().contains("still compiling"), "{}", ready.text());
    let status = get(&c, &gw.admin_url("/status")).await.json();
    let py = &status["plugins"][0];
    assert_eq!(
        (py["name"].as_str(), py["state"].as_str()),
        (Some("py"), Some("compiling")),
        "{status}"
    );
    assert!(
        metric(
            &c,
            &gw,
            "wasmgate_plugin_compiling_since_seconds{plugin=\"py\"}"
        )
        .await
            > 1e9
    );

    // Compiled: the node reloads on its own and serves it.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let reply = get(&c, &gw.url("/")).await;
        if reply.status == 200 {
            assert_eq!(reply.text(), "hello from python component");
            break;
        }
        assert_eq!(reply.status, 503, "{}", reply.text());
        assert!(
            Instant::now() < deadline,
            "not compiled in 300 s: {}",
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = get(&c, &gw.admin_url("/status")).await.json();
    assert_eq!(status["plugins"][0]["state"], "ready", "{status}");
    assert_eq!(get(&c, &gw.admin_url("/readyz")).await.status, 200);

    // Another component for the same plugin, left compiling at once (a
    // wait of 0): the Python one answers until the Rust one is ready.
    gw.rewrite(&config("component_rust", 0));
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let reply = get(&c, &gw.url("/")).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        if reply.text() == "hello from rust component" {
            break;
        }
        assert_eq!(reply.text(), "hello from python component");
        assert!(Instant::now() < deadline, "never switched: {}", gw.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&c, &gw.admin_url("/readyz")).await.status, 200);
}

/// A component that traps after its response's head: the client must not
/// take the body for whole (`wasi:http`: a body dropped without `finish` is
/// incomplete). HTTP/1.1 gets no last chunk and a closed connection, HTTP/2
/// a `RST_STREAM`; the access log says what the client got and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_fails_after_its_head_cuts_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let gw = GatewayProc::start(&format!(
        "listen: \"{{listen}}\"\naccess_log: {{path: {}}}\nplugins:\n  - {{name: handler, wasm: \"{{wasm:component_rust}}\"}}\nroutes:\n  - {{name: direct, component: {{plugin: handler}}}}\n",
        log.display()
    ));
    for protocol in ["--http1.1", "--http2-prior-knowledge"] {
        let output = std::process::Command::new("curl")
            .args(["-sS", protocol, "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(gw.url("/trap-midway"))
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(status, "200", "{protocol}: the head was sent: {stderr}");
        assert!(
            !output.status.success(),
            "{protocol}: curl took the cut body for whole"
        );
    }
    // The whole answer still works afterwards.
    let reply = get(&client(), &gw.url("/")).await;
    assert_eq!(reply.status, 200);
    let lines = crate::common::log_lines(&log, 2, |l| l["path"] == "/trap-midway");
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in lines {
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["error"], "trap", "{line}");
    }
}
