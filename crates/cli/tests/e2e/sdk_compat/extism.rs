//! Extism plugins from the AssemblyScript and C PDKs (`as_hello`,
//! `c_hello`) through `wasmgate serve` and `wasmgate call`, answering as the
//! Rust plugins and the official runtime do.

use crate::common::upstream::Upstream;
use crate::common::{client, plugin, post, wait_for_log, Server};
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------------------
// Extism: hello and count_vowels with config, vars and logs, through
// `wasmgate serve`, compared with the Rust plugins' answers.

/// What a `wasmgate serve` process writes to stderr, read as it comes.
fn capture_logs(server: &mut Server) -> Arc<Mutex<String>> {
    let logs = Arc::new(Mutex::new(String::new()));
    let stderr = server.child.stderr.take().unwrap();
    let sink = logs.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut logs = sink.lock().unwrap();
            logs.push_str(&line);
            logs.push('\n');
        }
    });
    logs
}

fn serve(module: &str, function: &str, extra: &[&str]) -> (Server, Arc<Mutex<String>>) {
    let path = plugin(module);
    let mut args = vec![path.to_str().unwrap(), function, "--log-level", "info"];
    args.extend_from_slice(extra);
    let mut server = Server::start(&args);
    let logs = capture_logs(&mut server);
    (server, logs)
}

const NAMES: &[&str] = &[
    "John Doe",
    "",
    "quote \" and backslash \\",
    "tab\tnewline\ncarriage\rbell\u{7}",
    "ünïcödé ✓ 🦀",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_hello_matches_rust_assemblyscript_pdk() {
    extism_hello_matches_rust("as_hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_hello_matches_rust_c_pdk() {
    extism_hello_matches_rust("c_hello").await;
}

async fn extism_hello_matches_rust(module: &str) {
    let (rust, _) = serve("hello", "hello", &[]);
    let (other, _) = serve(module, "hello", &[]);
    let c = client();
    for name in NAMES {
        let expected = post(&c, &rust.url("/"), *name).await;
        assert_eq!(expected.status, 200, "{}", expected.text());
        let reply = post(&c, &other.url("/"), *name).await;
        assert_eq!(reply.status, 200, "{name:?}: {}", reply.text());
        assert_eq!(reply.text(), expected.text(), "input {name:?}");
        assert_eq!(reply.json()["message"], format!("Hello {name}"));
    }
    let reply = post(&c, &other.url("/hello"), "Ada").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Ada"}"#);
    assert_eq!(reply.headers["content-type"], "application/json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_count_vowels_config_vars_and_logs_assemblyscript_pdk() {
    extism_count_vowels_config_vars_and_logs("as_hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_count_vowels_config_vars_and_logs_c_pdk() {
    extism_count_vowels_config_vars_and_logs("c_hello").await;
}

async fn extism_count_vowels_config_vars_and_logs(module: &str) {
    let c = client();
    // Default vowels; the var `total` runs across calls (and instances).
    let (rust, _) = serve("count_vowels", "count_vowels", &[]);
    let (other, logs) = serve(module, "count_vowels", &[]);
    for (input, count, total) in [("Hello World", 3, 3), ("aeiou AEIOU", 10, 13), ("", 0, 13)] {
        let expected = post(&c, &rust.url("/"), input).await;
        let reply = post(&c, &other.url("/"), input).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), expected.text(), "input {input:?}");
        let json = reply.json();
        assert_eq!(
            (json["count"].as_u64(), json["total"].as_u64()),
            (Some(count), Some(total)),
            "{json}"
        );
        assert_eq!(json["vowels"], "aeiouAEIOU");
    }
    // log_info from the plugin, named after it.
    let text = wait_for_log(
        || logs.lock().unwrap().clone(),
        "count_vowels: 10 vowels, total 13",
    );
    let line = text
        .lines()
        .find(|l| l.contains("count_vowels: 10 vowels, total 13"))
        .unwrap();
    assert!(
        line.contains("INFO") && line.contains(&format!("plugin={module}")),
        "{line}"
    );
    // Concurrent calls on several instances all read and write the one var
    // (read-modify-write per call, so, as with the Rust plugin, two calls at
    // once may both add to the same old total).
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let c = c.clone();
            let url = other.url("/");
            tokio::spawn(async move { post(&c, &url, "ab").await })
        })
        .collect();
    for r in requests {
        assert_eq!(r.await.unwrap().json()["count"], 1);
    }
    let reply = post(&c, &other.url("/"), "").await;
    assert!(
        reply.json()["total"].as_u64().unwrap() > 13,
        "{}",
        reply.text()
    );

    // Configured vowels, with a non-ASCII one and one JSON must escape.
    let config = "vowels=aeiouyé\"";
    let (rust, _) = serve("count_vowels", "count_vowels", &["--config", config]);
    let (other, _) = serve(module, "count_vowels", &["--config", config]);
    for input in ["Hello World, yay", "éé \"quoted\" ✓ 🦀 e", "rhythm"] {
        let expected = post(&c, &rust.url("/"), input).await;
        let reply = post(&c, &other.url("/"), input).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), expected.text(), "input {input:?}");
    }
    let reply = post(&c, &other.url("/"), "é").await;
    assert_eq!(reply.json()["vowels"], "aeiouyé\"");
    assert_eq!(reply.json()["count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_http_request_to_allowed_hosts_assemblyscript_pdk() {
    extism_http_request_to_allowed_hosts("as_hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_http_request_to_allowed_hosts_c_pdk() {
    extism_http_request_to_allowed_hosts("c_hello").await;
}

async fn extism_http_request_to_allowed_hosts(module: &str) {
    let up = Upstream::start("backend").await;
    let (server, logs) = serve(module, "fetch", &["--allow-host", "127.0.0.1"]);
    let c = client();
    let url = format!("http://127.0.0.1:{}/from/plugin?q=1", up.port);
    let reply = post(&c, &server.url("/"), url).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["upstream"], "backend");
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/from/plugin?q=1");
    wait_for_log(|| logs.lock().unwrap().clone(), "fetch: 200");
    // A host outside --allow-host: the call fails, nothing is sent.
    let url = format!("http://localhost:{}/denied", up.port);
    let reply = post(&c, &server.url("/"), url).await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("not allowed"), "{message}");
    assert_eq!(up.hits(), 1);
}

// ---------------------------------------------------------------------------
// Extism, against the official runtime: `wasmgate call` and the extism crate
// (reference/extism-ref, `make reference`) give byte-identical outputs, as
// differential.rs checks for the Rust and Go plugins.

fn call_both(
    module: &str,
    function: &str,
    flags: &[&str],
) -> Vec<(serde_json::Value, serde_json::Value)> {
    let path = plugin(module);
    let (ours, theirs) =
        crate::common::reference::run_both(path.to_str().unwrap(), function, flags);
    assert_eq!(ours.len(), theirs.len());
    ours.into_iter().zip(theirs).collect()
}

fn assert_same_outputs(module: &str, function: &str, flags: &[&str]) {
    for (ours, theirs) in call_both(module, function, flags) {
        let context =
            format!("{module} {function} {flags:?}\n  wasmgate: {ours}\n  extism:   {theirs}");
        assert_eq!(ours["ok"], true, "{context}");
        assert_eq!(theirs["ok"], true, "{context}");
        assert_eq!(ours["output_b64"], theirs["output_b64"], "{context}");
    }
}

#[test]
fn extism_plugins_match_the_official_runtime_assemblyscript_pdk() {
    extism_plugins_match_the_official_runtime("as_hello");
}

#[test]
fn extism_plugins_match_the_official_runtime_c_pdk() {
    extism_plugins_match_the_official_runtime("c_hello");
}

fn extism_plugins_match_the_official_runtime(module: &str) {
    let long = "long ".repeat(5000);
    for input in NAMES.iter().copied().chain([long.as_str()]) {
        assert_same_outputs(module, "hello", &["--input", input]);
    }
    assert_same_outputs(
        module,
        "count_vowels",
        &["--input", "Hello World", "--repeat", "3"],
    );
    assert_same_outputs(
        module,
        "count_vowels",
        &[
            "--input",
            "éé Hello \"World\" 🦀",
            "--config",
            "vowels=lo\"é",
            "--repeat",
            "2",
        ],
    );
}
