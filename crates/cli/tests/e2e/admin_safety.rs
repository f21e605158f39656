//! The admin API's defences over real HTTP (docs/admin.md, "Access and the
//! threat model"): foreign `Host` (DNS rebinding) and `Origin` headers are
//! refused on every endpoint and method, a POST without a token needs
//! intent, only configured origins get CORS, file mode is read-only unless
//! `admin_writes` is on (and then the operator's file is never written), and
//! every change is audited.

use crate::common::gateway::{send, GatewayProc};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient, Reply};

/// Every endpoint and method the admin listener documents in the OpenAPI
/// document it serves (which a unit test holds equal to what its router
/// serves), as a concrete path, but the probes, which no check guards.
async fn documented_endpoints(c: &HttpClient, gw: &GatewayProc) -> Vec<(String, String)> {
    let text = call(c, gw, "GET", "/openapi.yaml", &[], "").await.text();
    let document: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut endpoints = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        if path == "/healthz" || path == "/readyz" {
            continue;
        }
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_some() {
                endpoints.push((method.to_uppercase(), path.replace("{name}", "x")));
            }
        }
    }
    // What this test once missed is there now.
    for expected in [
        "/services/x",
        "/services",
        "/cluster",
        "/stats/history",
        "/",
        "/ui/app.js",
    ] {
        assert!(
            endpoints.iter().any(|(_, p)| p == expected),
            "{expected} is not in the document"
        );
    }
    endpoints
}

fn config(backend: &Upstream, extra: &str) -> String {
    format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
{extra}
plugins:
  - {{name: tag, wasm: "{{wasm:add_header}}"}}
upstreams:
  - {{name: backend, nodes: [{{address: "{}"}}]}}
routes:
  - {{name: home, path: {{prefix: /home}}, plugins: [{{plugin: tag}}], upstream: backend}}
"#,
        backend.address()
    )
}

async fn call(
    c: &HttpClient,
    gw: &GatewayProc,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    send(c, method, &gw.admin_url(path), headers, body.to_string()).await
}

fn refused_by(reply: &Reply, check: &str) -> bool {
    reply.status == 403 && reply.json()["check"] == check
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_host_and_origin_are_refused_on_every_endpoint_and_method() {
    let backend = Upstream::start("backend").await;
    let gw = GatewayProc::start(&config(&backend, "admin_writes: true"));
    let c = client();
    let rebound = format!("evil.example:{}", gw.admin_port);
    let intent = ("x-wasmgate-admin", "1");
    let body = "{}";
    for (method, path) in documented_endpoints(&c, &gw).await {
        let (method, path) = (method.as_str(), path.as_str());
        let r = call(&c, &gw, method, path, &[("host", &rebound), intent], body).await;
        assert!(
            refused_by(&r, "host"),
            "{method} {path} with Host {rebound}: {} {}",
            r.status,
            r.text()
        );
        assert!(r.text().contains("admin_hosts"), "{}", r.text());
        for origin in ["http://evil.example", "null"] {
            let r = call(&c, &gw, method, path, &[("origin", origin), intent], body).await;
            assert!(
                refused_by(&r, "origin"),
                "{method} {path} with Origin {origin}: {} {}",
                r.status,
                r.text()
            );
            assert!(r.header("access-control-allow-origin").is_none());
        }
    }
    // Nothing changed, nothing reloaded.
    let status = call(&c, &gw, "GET", "/status", &[], "").await.json();
    assert_eq!(status["reload"]["generation"], 1, "{status}");
    assert_eq!(status["reload"]["reloads"], 0, "{status}");
    assert!(status["last_change"].is_null(), "{status}");

    // The probes answer whatever the name (they reveal nothing).
    let probe = call(&c, &gw, "GET", "/healthz", &[("host", &rebound)], "").await;
    assert_eq!(probe.status, 200);

    // The listener's own names pass: loopback names and IPs, its own origin.
    let own_origin = format!("http://127.0.0.1:{}", gw.admin_port);
    for host in [
        format!("localhost:{}", gw.admin_port),
        format!("127.0.0.1:{}", gw.admin_port),
        "dashboard.localhost".to_string(),
    ] {
        let r = call(&c, &gw, "GET", "/routes/home", &[("host", &host)], "").await;
        assert_eq!(r.status, 200, "Host {host}: {}", r.text());
    }
    let r = call(&c, &gw, "GET", "/config", &[("origin", &own_origin)], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        &c,
        &gw,
        "PUT",
        "/routes/new",
        &[("origin", &own_origin)],
        r#"{"respond": {"body": "new"}}"#,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(send(&c, "GET", &gw.url("/"), &[], "").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_a_token_needs_intent() {
    let backend = Upstream::start("backend").await;
    let gw = GatewayProc::start(&config(&backend, ""));
    let c = client();
    for path in ["/reload", "/profile?seconds=0.1"] {
        for headers in [
            vec![],
            vec![("content-type", "text/plain;charset=UTF-8")],
            vec![("content-type", "application/x-www-form-urlencoded")],
            vec![("content-type", "multipart/form-data; boundary=x")],
        ] {
            let r = call(&c, &gw, "POST", path, &headers, "a=b").await;
            assert!(
                refused_by(&r, "intent"),
                "POST {path} {headers:?}: {} {}",
                r.status,
                r.text()
            );
            assert!(r.text().contains("X-Wasmgate-Admin"), "{}", r.text());
        }
    }
    let status = call(&c, &gw, "GET", "/status", &[], "").await.json();
    assert_eq!(status["reload"]["reloads"], 0, "{status}");
    for headers in [
        [("content-type", "application/json")],
        [("x-wasmgate-admin", "1")],
    ] {
        let r = call(&c, &gw, "POST", "/reload", &headers, "").await;
        assert_eq!(r.status, 200, "{headers:?}: {}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_token_is_the_intent_and_origins_stay_checked() {
    let backend = Upstream::start("backend").await;
    let gw = GatewayProc::start(&config(&backend, "admin_token: s3cret"));
    let c = client();
    let auth = ("authorization", "Bearer s3cret");
    let r = call(&c, &gw, "POST", "/reload", &[auth], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(&c, &gw, "POST", "/reload", &[("x-wasmgate-admin", "1")], "").await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = call(
        &c,
        &gw,
        "POST",
        "/reload",
        &[auth, ("origin", "http://evil.example")],
        "",
    )
    .await;
    assert!(refused_by(&r, "origin"), "{} {}", r.status, r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_listed_origins_and_hosts_are_let_in_with_cors() {
    let backend = Upstream::start("backend").await;
    let gw = GatewayProc::start(&config(
        &backend,
        "admin_origins: [\"http://dash.example:8000\"]\nadmin_hosts: [gw-admin.internal]",
    ));
    let c = client();
    let listed = ("origin", "http://dash.example:8000");
    let preflight = call(
        &c,
        &gw,
        "OPTIONS",
        "/routes/home",
        &[listed, ("access-control-request-method", "PUT")],
        "",
    )
    .await;
    assert_eq!(preflight.status, 204);
    assert_eq!(
        preflight.headers["access-control-allow-origin"],
        "http://dash.example:8000"
    );
    assert!(preflight.headers["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("PUT"));
    let r = call(&c, &gw, "GET", "/routes/home", &[listed], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "http://dash.example:8000"
    );
    // A foreign origin's preflight gets no CORS headers.
    let r = call(
        &c,
        &gw,
        "OPTIONS",
        "/routes/home",
        &[("origin", "http://other.example")],
        "",
    )
    .await;
    assert!(refused_by(&r, "origin"));
    assert!(r.header("access-control-allow-origin").is_none());
    // Same origin: no CORS headers needed or sent.
    let r = call(&c, &gw, "GET", "/routes/home", &[], "").await;
    assert!(r.header("access-control-allow-origin").is_none());
    // A listed name passes the Host check; another does not.
    let r = call(
        &c,
        &gw,
        "GET",
        "/status",
        &[("host", "gw-admin.internal")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        &c,
        &gw,
        "GET",
        "/status",
        &[("host", "gw-admin.internal.evil")],
        "",
    )
    .await;
    assert!(refused_by(&r, "host"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_mode_is_read_only_unless_admin_writes_and_every_change_is_audited() {
    let backend = Upstream::start("backend").await;
    let intent = ("x-wasmgate-admin", "1");
    // The operator's own file, with comments and layout worth keeping.
    let gw = GatewayProc::start(&format!(
        "# the operator's comment\n{}",
        config(&backend, "")
    ));
    let c = client();
    let written = std::fs::read_to_string(&gw.config).unwrap();
    let r = call(
        &c,
        &gw,
        "PUT",
        "/routes/new",
        &[intent],
        r#"{"respond": {"body": "new"}}"#,
    )
    .await;
    assert!(refused_by(&r, "admin_writes"), "{} {}", r.status, r.text());
    assert!(r.text().contains("admin_writes: true"), "{}", r.text());
    let r = call(&c, &gw, "DELETE", "/routes/home", &[intent], "").await;
    assert!(refused_by(&r, "admin_writes"), "{} {}", r.status, r.text());
    assert_eq!(std::fs::read_to_string(&gw.config).unwrap(), written);
    let status = call(&c, &gw, "GET", "/status", &[], "").await.json();
    assert_eq!(status["reload"]["generation"], 1);
    assert_eq!(status["config"]["admin_writes"], false);
    let last = &status["last_change"];
    assert_eq!(last["action"], "DELETE route home", "{status}");
    assert!(last["outcome"].as_str().unwrap().starts_with("refused"));

    // Turned on in the file (the watcher reloads it): writes are applied,
    // audited, and kept beside the file, which stays as written.
    let on = format!(
        "# the operator's comment\n{}",
        config(&backend, "admin_writes: true")
    );
    gw.rewrite(&on);
    let written = std::fs::read_to_string(&gw.config).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let status = call(&c, &gw, "GET", "/status", &[], "").await.json();
        if status["config"]["admin_writes"] == true {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = call(
        &c,
        &gw,
        "PUT",
        "/routes/new",
        &[intent],
        r#"{"path": {"exact": "/new"}, "respond": {"body": "new"}}"#,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        send(&c, "GET", &gw.url("/new"), &[], "").await.text(),
        "new"
    );
    let status = call(&c, &gw, "GET", "/status", &[], "").await.json();
    let last = &status["last_change"];
    assert_eq!(last["action"], "PUT route new", "{status}");
    assert!(last["before"].is_null());
    assert_eq!(last["after"].as_str().unwrap().len(), 16);
    assert_eq!(last["token"], false);
    assert!(last["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(last["outcome"].as_str().unwrap().starts_with("applied"));
    assert!(gw.logs().contains("admin change"), "{}", gw.logs());
    assert_eq!(std::fs::read_to_string(&gw.config).unwrap(), written);
    let admin_file = gw.dir().join("wasmgate.admin.yaml");
    let kept = std::fs::read_to_string(&admin_file).unwrap();
    assert!(kept.contains("name: new"), "{kept}");

    // `wasmgate check` sees what runs: the file with its admin changes.
    let out = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&gw.config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ok (2 routes"), "{stdout}");

    // Deleting the admin file drops the admin changes at the next reload.
    std::fs::remove_file(&admin_file).unwrap();
    let r = call(&c, &gw, "POST", "/reload", &[intent], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(
        send(&c, "GET", &gw.url("/new"), &[], "").await.text(),
        "new"
    );
    let routes = call(&c, &gw, "GET", "/routes", &[], "").await.json();
    assert_eq!(routes.as_array().unwrap().len(), 1, "{routes}");
}
