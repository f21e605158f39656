//! What outsiders and plugins cannot do (docs/security.md): a plugin cannot
//! forge log lines; a client's error answer tells the kind and the request
//! id, nothing of the inside; secrets are not read back through the admin
//! API; etcd is reached over TLS as a user, and what it holds is sealed.

use crate::common::gateway::{admin, get, send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, free_port, plugin, post, wasmgate};
use wasmgate_testkit::{EtcdServer, ETCD_NODE_PASSWORD, ETCD_NODE_USER};

/// `wasmgate call` of `function` in `plugin_name` with `input`, logging at
/// `level`: what it wrote to stderr (its log).
fn call_log(plugin_name: &str, function: &str, input: &str) -> String {
    let out = wasmgate()
        .arg("call")
        .arg(plugin(plugin_name))
        .args([function, "--input", input])
        .env("RUST_LOG", "wasmgate=trace")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_plugin_cannot_forge_log_lines() {
    let forged = "ok\n2026-01-01T00:00:00.000000Z  INFO wasmgate: admin token accepted\r\x1b[2J";
    // Extism's log_* host functions, and a guest's WASI stdout and stderr.
    for (plugin_name, function) in [("capabilities", "log"), ("faults", "stdout")] {
        let log = call_log(plugin_name, function, forged);
        assert!(
            log.contains(
                r"ok\n2026-01-01T00:00:00.000000Z  INFO wasmgate: admin token accepted\r\u{1b}[2J"
            ),
            "{plugin_name}: {log}"
        );
        assert!(
            !log.lines().any(|line| line.starts_with("2026-01-01")),
            "{plugin_name}: a line of the plugin's own: {log}"
        );
        assert!(!log.contains('\x1b'), "{plugin_name}: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_answers_tell_clients_the_kind_and_request_id_and_operators_the_rest() {
    let dead = free_port(); // nothing listens there
    let yaml = |details: bool| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
error_details: {details}
upstreams:
  - {{name: gone, nodes: [{{address: "127.0.0.1:{dead}"}}]}}
routes:
  - {{name: dead, path: {{prefix: /dead}}, upstream: gone}}
"#
        )
    };
    let gw = GatewayProc::start(&yaml(false));
    let c = client();
    let r = get(&c, &gw.url("/dead")).await;
    assert_eq!(r.status, 502);
    let error = &r.json()["error"];
    assert_eq!(error["kind"], "upstream_unreachable");
    let id = error["request_id"].as_u64().expect("a request id");
    assert_eq!(
        error.as_object().unwrap().len(),
        2,
        "nothing but the kind and the id: {error}"
    );
    assert!(!r.text().contains(&dead.to_string()), "{}", r.text());
    // No route: the host and path the client sent are not echoed either.
    let r = get(&c, &gw.url("/nowhere/secret-path")).await;
    assert_eq!(
        (r.status, r.json()["error"]["kind"].as_str()),
        (404, Some("no_route"))
    );
    assert!(!r.text().contains("nowhere"), "{}", r.text());

    // The operator finds the whole error under the id the client got.
    let found = admin(&c, &gw, "GET", &format!("/errors/{id}"), "").await;
    assert_eq!(found.status, 200, "{}", found.text());
    assert_eq!(found.headers["x-content-type-options"], "nosniff");
    let found = found.json();
    assert_eq!(found["status"], 502);
    assert!(
        found["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("127.0.0.1:{dead}"))),
        "{found}"
    );
    assert!(
        gw.logs().contains(&format!("request_id={id}")),
        "the log names it too"
    );
    let missing = admin(&c, &gw, "GET", "/errors/999999999", "").await;
    assert_eq!(missing.status, 404);

    // With error_details (a development setting), clients get it all.
    let gw = GatewayProc::start(&yaml(true));
    let r = get(&c, &gw.url("/dead")).await;
    assert!(
        r.text().contains(&format!("127.0.0.1:{dead}")),
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_redacted_in_admin_reads_and_kept_when_written_back() {
    let gw = GatewayProc::start(
        r#"
listen: "{listen}"
admin: "{admin}"
admin_writes: true
plugins:
  - name: caps
    wasm: "{wasm:capabilities}"
    config: {api_key: s3cret, region: eu-west}
    vm_config: {upstream: {password: hunter2, host: db}}
    secret_fields: [region]
routes:
  - name: config
    path: {prefix: /config/}
    function: {plugin: caps, function: config}
    plugins: []
"#,
    );
    let c = client();
    let shown = admin(&c, &gw, "GET", "/plugins/caps", "").await.json();
    assert_eq!(shown["config"]["api_key"], "<redacted>");
    assert_eq!(
        shown["config"]["region"], "<redacted>",
        "marked by secret_fields"
    );
    assert_eq!(shown["vm_config"]["upstream"]["password"], "<redacted>");
    assert_eq!(shown["vm_config"]["upstream"]["host"], "db");
    let whole = admin(&c, &gw, "GET", "/config", "").await.text();
    assert!(
        !whole.contains("s3cret") && !whole.contains("hunter2"),
        "{whole}"
    );

    // Written back as read, with one change: the secrets keep their values.
    let mut written = shown.clone();
    written["pool_size"] = serde_json::json!(8);
    let put = admin(&c, &gw, "PUT", "/plugins/caps", &written.to_string()).await;
    assert_eq!(put.status, 200, "{}", put.text());
    let r = post(&c, &gw.url("/config/"), "api_key").await;
    assert_eq!(r.text(), "s3cret");
    let kept = std::fs::read_to_string(gw.dir().join("wasmgate.admin.yaml")).unwrap();
    assert!(
        kept.contains("s3cret") && !kept.contains("<redacted>"),
        "{kept}"
    );
    // A new entry cannot be written with a marker: there is nothing to keep.
    let mut fresh = written.clone();
    fresh["name"] = serde_json::json!("fresh");
    let put = admin(&c, &gw, "PUT", "/plugins/fresh", &fresh.to_string()).await;
    assert_eq!(put.status, 400, "{}", put.text());
    assert!(put.text().contains("config.api_key"), "{}", put.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_grants_plugins_only_what_the_node_file_allows() {
    let registry = Upstream::start("registry").await;
    let yaml = r#"
listen: "{listen}"
admin: "{admin}"
admin_writes: true
grants: {allowed_hosts: ["*.example.com"], services: [], env: ["PULL_*"]}
services:
  - {name: cache, redis: "redis://127.0.0.1:1/0"}
"#;
    let gw = GatewayProc::start_with_env(
        yaml,
        &[],
        &[("NODE_SECRET", "hunter2"), ("PULL_PASSWORD", "granted")],
    );
    let c = client();
    let put = |body: String| {
        let (c, gw) = (&c, &gw);
        async move { admin(c, gw, "PUT", "/plugins/p", &body).await }
    };
    let wasm = crate::common::plugin("capabilities");
    let wasm = wasm.display();
    // Within the grants: accepted.
    let ok = put(format!(
        r#"{{"wasm": "{wasm}", "allowed_hosts": ["api.example.com"]}}"#
    ))
    .await;
    assert!(ok.status < 300, "{}", ok.text());
    // Beyond them: refused whole, with the field and what would grant it.
    for (body, field, grant) in [
        (
            format!(r#"{{"wasm": "{wasm}", "allowed_hosts": ["*"]}}"#),
            "allowed_hosts[0]",
            "grants.allowed_hosts",
        ),
        (
            format!(r#"{{"wasm": "{wasm}", "allowed_paths": {{"/etc": "/etc"}}}}"#),
            "allowed_paths./etc",
            "grants.allowed_paths",
        ),
        (
            format!(r#"{{"wasm": "{wasm}", "services": ["cache"]}}"#),
            "services[0]",
            "grants.services",
        ),
    ] {
        let refused = put(body).await;
        assert_eq!(refused.status, 422, "{}", refused.text());
        assert!(
            refused.text().contains(field) && refused.text().contains(grant),
            "{}",
            refused.text()
        );
    }
    // A registry password from a variable the node file does not grant is
    // refused before anything is pulled: the registry hears nothing.
    let oci = format!("oci://127.0.0.1:{}/x:1", registry.port);
    for variable in ["NODE_SECRET", "WASMGATE_ADMIN_TOKEN"] {
        let body = format!(
            r#"{{"wasm": "{oci}", "registry": {{"plain_http": true, "username": "u", "password_env": "{variable}"}}}}"#
        );
        let refused = put(body).await;
        assert_eq!(refused.status, 422, "{}", refused.text());
        assert!(
            refused.text().contains("password_env"),
            "{}",
            refused.text()
        );
    }
    assert_eq!(registry.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Host-side buffers a filter fills are capped (docs/proxy-wasm.md, "Host
/// limits"): `shared_state` (proxy-wasm Rust SDK) enqueues every request's
/// path on a queue nobody drains. Past `shared_queue_items` the enqueue is
/// refused (NotFound, which this filter unwraps: its request fails, the
/// next ones too), counted per plugin, and the queue holds no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_cannot_fill_host_memory_past_its_limits() {
    let upstream = Upstream::start("backend").await;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
limits: {{proxy_wasm: {{shared_queue_items: 3}}}}
plugins:
  - {{name: state, wasm: "{{wasm:shared_state}}"}}
upstreams: [{{name: backend, nodes: [{{address: "{}"}}]}}]
routes:
  - {{name: open, path: {{prefix: /health}}, upstream: backend}}
  - {{name: all, path: {{prefix: /}}, plugins: [{{plugin: state}}], upstream: backend}}
"#,
        upstream.address()
    ));
    let c = client();
    for i in 0..3 {
        let r = get(&c, &gw.url(&format!("/queued/{i}"))).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for i in 0..2 {
        let r = get(&c, &gw.url(&format!("/refused/{i}"))).await;
        assert!(
            r.status >= 500,
            "the filter panics on the refusal: {}",
            r.text()
        );
    }
    let metrics = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    let line = |prefix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
            .to_string()
    };
    assert!(
        line(r#"wasmgate_plugin_host_limit_refusals_total{plugin="state",route="all",limit="shared_queue_items"}"#)
            .ends_with(" 2"),
        "{metrics}"
    );
    assert!(
        line(r#"wasmgate_proxy_wasm_shared_queue_items{vm_id="state"}"#).ends_with(" 3"),
        "{metrics}"
    );
    assert!(gw
        .logs()
        .contains("limits.proxy_wasm.shared_queue_items is 3"));
    // Everything else is served.
    assert_eq!(get(&c, &gw.url("/health")).await.status, 200);
}

/// A node file for the secured etcd: TLS with its CA and a client
/// certificate, the node user's password from `$WG_ETCD_PASSWORD`, objects
/// sealed with the key in `key_file`.
fn secured_node_file(etcd: &EtcdServer, name: &str, key_file: &std::path::Path) -> String {
    let s = etcd.secured();
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
config:
  etcd: ["{url}"]
  node_name: {name}
  etcd_tls: {{ca: "{ca}", cert: "{cert}", key: "{key}"}}
  etcd_auth: {{user: {user}, password_env: WG_ETCD_PASSWORD}}
  encryption: {{keys: [{{id: k1, file: "{key_file}"}}]}}
"#,
        url = etcd.url(),
        ca = s.pki.ca.display(),
        cert = s.client.cert.display(),
        key = s.client.key.display(),
        user = ETCD_NODE_USER,
        key_file = key_file.display(),
    )
}

/// The node's `/status` once `check` holds for it (15 s at most).
async fn until_status(
    c: &crate::common::HttpClient,
    gw: &GatewayProc,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let status = send(c, "GET", &gw.admin_url("/status"), &[], "")
            .await
            .json();
        if check(&status) {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_is_reached_over_tls_as_a_user_and_holds_only_sealed_objects() {
    let etcd = EtcdServer::start_secured();
    let dir = tempfile::tempdir().unwrap();
    // A key as docs/cluster.md says to make one.
    let key = std::process::Command::new("openssl")
        .args(["rand", "-base64", "32"])
        .output()
        .unwrap();
    let key_file = dir.path().join("k1.key");
    std::fs::write(&key_file, &key.stdout).unwrap();
    let node_file = dir.path().join("node.yaml");
    let node_yaml = secured_node_file(&etcd, "secure1", &key_file);
    std::fs::write(
        &node_file,
        crate::common::gateway::render(&node_yaml, free_port(), free_port()),
    )
    .unwrap();
    let cluster_file = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster_file,
        r#"
services:
  - {name: cache, redis: "redis://:service-pw-5d1e@127.0.0.1:1"}
routes:
  - {name: home, path: {prefix: /home}, respond: {status: 200, body: sealed-home}}
"#,
    )
    .unwrap();
    let pushed = wasmgate()
        .args(["config", "push", "--no-load", "-c"])
        .arg(&cluster_file)
        .arg("--node")
        .arg(&node_file)
        .env("WG_ETCD_PASSWORD", ETCD_NODE_PASSWORD)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&pushed.stdout).into_owned()
        + &String::from_utf8_lossy(&pushed.stderr);
    assert!(pushed.status.success() && said.contains("sealed"), "{said}");

    let password = [("WG_ETCD_PASSWORD", ETCD_NODE_PASSWORD)];
    let gw = GatewayProc::start_with_env(&node_yaml, &[], &password);
    let c = client();
    until_status(&c, &gw, |s| s["config"]["revision"].as_i64() > Some(0)).await;
    assert_eq!(get(&c, &gw.url("/home")).await.text(), "sealed-home");
    // Written through the node's admin API: sealed as well.
    let put = admin(
        &c,
        &gw,
        "PUT",
        "/routes/second",
        r#"{"path": {"prefix": "/second"}, "respond": {"body": "second-body"}}"#,
    )
    .await;
    assert_eq!(put.status, 201, "{}", put.text());
    assert_eq!(get(&c, &gw.url("/second")).await.text(), "second-body");
    let raw = etcd.etcdctl(&["get", "/wasmgate/", "--prefix"]);
    assert!(raw.contains(r#""sealed":"aes-256-gcm""#), "{raw}");
    for secret in ["service-pw-5d1e", "sealed-home", "second-body", "redis://"] {
        assert!(
            !raw.contains(secret),
            "{secret} in plain text in etcd: {raw}"
        );
    }

    // An etcd writer without the key cannot add to the configuration.
    etcd.etcdctl(&[
        "put",
        "/wasmgate/routes/forged",
        r#"{"seq": 9, "route": {"path": {"prefix": "/forged"}, "respond": {"body": "forged"}}}"#,
    ]);
    let status = until_status(&c, &gw, |s| {
        s["config"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("/wasmgate/routes/forged") && e.contains("not sealed"))
    })
    .await;
    assert_eq!(get(&c, &gw.url("/forged")).await.status, 404, "{status}");
    assert_eq!(get(&c, &gw.url("/home")).await.text(), "sealed-home");

    // A node with the wrong password is refused by etcd, and says why.
    let refused = GatewayProc::start_with_env(&node_yaml, &[], &[("WG_ETCD_PASSWORD", "wrong")]);
    until_status(&c, &refused, |s| {
        s["config"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("authentication failed"))
    })
    .await;
    assert_eq!(get(&c, &refused.url("/home")).await.status, 503);
}
