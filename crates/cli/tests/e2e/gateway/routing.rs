//! Routes as the gateway matches and rewrites them: path and header
//! matches, header edits both ways, HTTP/2 cleartext, query matches,
//! rewrites and redirects, mirrors, fault injection, Extism functions on the
//! gateway's listener, and CORS.

use crate::common::client;
use crate::common::gateway::{get, send, until_metric, with_upstream, GatewayProc};
use crate::common::upstream::Upstream;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_and_header_filters_edit_both_directions() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: rust_header, wasm: "{wasm:add_header}", priority: 10}
  - {name: go_header, wasm: "{wasm:go_add_header}", priority: 20}
upstreams:
  - name: backend
    nodes: [{address: "{backend}"}]
routes:
  - name: only-post
    path: {exact: /submit}
    methods: [POST]
    headers: {x-tenant: blue}
    respond: {status: 201, body: "submitted"}
  - name: wildcard-host
    hosts: ["*.example.com"]
    respond: {status: 200, body: "example subdomain"}
  - name: users
    path: {regex: "/users/[0-9]+"}
    plugins:
      - {plugin: rust_header, conf: rust-conf}
      - {plugin: go_header, conf: go-conf}
    upstream: backend
  - name: plain
    path: {prefix: /plain/}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    // Chain order: go_header (priority 20) runs before rust_header (10).
    let reply = get(&c, &gw.url("/users/42?x=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["path"], "/users/42?x=1");
    assert_eq!(reply.header("x-seen-path"), Some("/users/42?x=1"));
    assert_eq!(reply.header("x-upstream"), Some("backend"));
    // Both filters added their request header; the upstream saw both values.
    let seen = echo["headers"]["x-wasmgate-filter"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        seen.contains("go-conf") && seen.contains("rust-conf"),
        "{seen}"
    );
    // Forwarding headers.
    assert_eq!(echo["headers"]["x-forwarded-for"], "127.0.0.1");
    assert_eq!(echo["headers"]["x-forwarded-proto"], "http");
    assert_eq!(
        echo["headers"]["x-forwarded-host"],
        format!("127.0.0.1:{}", gw.port)
    );
    assert_eq!(echo["headers"]["via"], "1.1 wasmgate");
    assert!(reply.header("via").unwrap().contains("1.1 wasmgate"));

    // Regex is anchored: /users/42/x is not `users`, and nothing else matches.
    let reply = get(&c, &gw.url("/users/42/x")).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["kind"], "no_route");

    // Method and header conditions.
    let reply = send(&c, "POST", &gw.url("/submit"), &[("x-tenant", "blue")], "").await;
    assert_eq!((reply.status, reply.text().as_str()), (201, "submitted"));
    let reply = send(&c, "POST", &gw.url("/submit"), &[("x-tenant", "red")], "").await;
    assert_eq!(reply.status, 404);
    let reply = get(&c, &gw.url("/submit")).await;
    assert_eq!(reply.status, 404);

    // Wildcard hosts match subdomains, not the apex.
    let reply = send(&c, "GET", &gw.url("/"), &[("host", "api.example.com")], "").await;
    assert_eq!(reply.text(), "example subdomain");
    let reply = send(&c, "GET", &gw.url("/"), &[("host", "example.com")], "").await;
    assert_eq!(reply.status, 404);

    // A route without filters proxies bodies as they are.
    let reply = send(&c, "PUT", &gw.url("/plain/x"), &[], "payload").await;
    assert_eq!(reply.json()["body"], "payload");
    assert_eq!(reply.json()["method"], "PUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_cleartext_downstream() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes: [{name: all, plugins: [{plugin: h, conf: over-h2}], upstream: backend}]
"#,
    )
    .await;
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let reply = send(&h2, "POST", &gw.url("/h2"), &[], "body over h2").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["body"], "body over h2");
    assert_eq!(echo["headers"]["x-wasmgate-filter"], "over-h2");
    assert_eq!(reply.header("x-seen-path"), Some("/h2"));
}

/// A route's own header changes: the request's before its filters and the
/// upstream see it (the filter echoes what it saw), the response's on every
/// answer, a filter's local one too. A bad header name is refused by check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_own_header_changes_apply_to_requests_and_every_response() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: fault, wasm: "{wasm:fault_injection}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: local
    path: {prefix: /local}
    plugins: [{plugin: fault, conf: {body: "from the filter", http_status: 200}}]
    response_headers: {set: {x-served-by: wasmgate}}
    upstream: backend
  - name: edited
    request_headers: {remove: [x-secret], set: {x-env: prod}, add: {x-via: edge}}
    response_headers: {remove: [x-upstream], add: {x-served-by: wasmgate}}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let reply = send(
        &c,
        "GET",
        &gw.url("/edited"),
        &[
            ("x-secret", "s3cret"),
            ("x-env", "dev"),
            ("x-via", "client"),
        ],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-served-by"), Some("wasmgate"));
    assert_eq!(
        reply.header("x-upstream"),
        None,
        "removed from the response"
    );
    let seen = up.received("/edited").pop().unwrap();
    assert!(seen.get("x-secret").is_none());
    assert_eq!(seen["x-env"], "prod");
    assert_eq!(seen.get_all("x-via").iter().count(), 2);
    let local = get(&c, &gw.url("/local")).await;
    assert_eq!(local.text(), "from the filter");
    assert_eq!(local.header("x-served-by"), Some("wasmgate"));

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, request_headers: {set: {\"bad name\": x}}}]\n",
    );
    assert!(
        stderr.contains("routes[r].request_headers") && stderr.contains("bad name"),
        "{stderr}"
    );
}

/// A route's URL changes: a prefix replaced by whole segments (the query
/// kept) and the host replaced, as the upstream sees them; query matches
/// with decoded values, header and query expressions; a redirect that
/// replaces a prefix. `check` refuses a rewrite that gives both a path and
/// a prefix, and an expression that does not compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_query_matches_and_prefix_redirects() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: gold
    path: {prefix: /shop}
    query: {tier: gold, who: "a b"}
    rewrite: {replace_prefix: {from: /shop, to: /store}, host: internal.example}
    upstream: backend
  - name: patterned
    path: {prefix: /shop}
    header_regex: {x-tier: "silver|bronze"}
    query_regex: {id: "[0-9]+"}
    respond: {status: 200, body: "patterned"}
  - name: others
    path: {prefix: /shop}
    respond: {status: 200, body: "not gold"}
  - name: moved
    path: {prefix: /old}
    redirect: {replace_prefix: {from: /old, to: /new}, status: 308}
"#,
    )
    .await;
    let c = client();
    let reply = get(&c, &gw.url("/shop/items?tier=gold&who=a%20b&x=1")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["path"], "/store/items?tier=gold&who=a%20b&x=1");
    assert_eq!(echo["headers"]["host"], "internal.example");
    for other in [
        "/shop/items?tier=silver&who=a+b",
        "/shop/items",
        "/shop?tier=gold",
    ] {
        assert_eq!(get(&c, &gw.url(other)).await.text(), "not gold", "{other}");
    }
    // Expressions match whole values: of any of a header's values, and of
    // the decoded query parameter.
    let patterned = |path: &'static str, tier: &'static str| {
        let (c, url) = (c.clone(), gw.url(path));
        async move { send(&c, "GET", &url, &[("x-tier", tier)], "").await.text() }
    };
    assert_eq!(patterned("/shop?id=42", "bronze").await, "patterned");
    assert_eq!(patterned("/shop?id=42x", "bronze").await, "not gold");
    assert_eq!(patterned("/shop?id=42", "bronzed").await, "not gold");
    assert_eq!(patterned("/shop", "silver").await, "not gold");
    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, header_regex: {x: '('}}]\n",
    );
    assert!(stderr.contains("routes[r].header_regex.x"), "{stderr}");
    // A prefix is replaced by whole segments only.
    let reply = get(&c, &gw.url("/shopping?tier=gold&who=a+b")).await;
    assert_eq!(reply.json()["path"], "/shopping?tier=gold&who=a+b");
    let moved = get(&c, &gw.url("/old/page?q=1")).await;
    assert_eq!(moved.status, 308);
    let location = moved.header("location").unwrap();
    assert!(location.ends_with("/new/page?q=1"), "{location}");

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, rewrite: {path: /a, replace_prefix: {from: /b, to: /c}}}]\n",
    );
    assert!(stderr.contains("routes[r].rewrite"), "{stderr}");
}

/// Mirrors: a copy of each request, body and all, goes to the mirror
/// upstream while the original is answered by its own; a share copies
/// exactly that share; a mirror that is down costs the original nothing
/// and is counted in /metrics. `check` refuses a mirror of a fixed answer
/// and one naming no upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_copy_requests_and_never_hold_up_the_original() {
    let main = Upstream::start("main").await;
    let shadow = Upstream::start("shadow").await;
    // A mirror that takes connections and never reads from them.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stalled_address = stalled.local_addr().unwrap().to_string();
    let _holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = stalled.accept().await {
            held.push(stream);
        }
    });
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - {{name: main, nodes: [{{address: "{}"}}]}}
  - {{name: shadow, nodes: [{{address: "{}"}}]}}
  - {{name: gone, retries: 0, nodes: [{{address: "127.0.0.1:1"}}]}}
  - {{name: stalled, nodes: [{{address: "{}"}}]}}
routes:
  - {{name: slow, path: {{prefix: /slow-mirror}}, upstream: main, mirror: [{{upstream: stalled}}]}}
  - {{name: all, path: {{prefix: /all}}, upstream: main, mirror: [{{upstream: shadow}}]}}
  - {{name: half, path: {{prefix: /half}}, upstream: main, mirror: [{{upstream: shadow, percent: 50}}]}}
  - {{name: dead, path: {{prefix: /dead}}, upstream: main, mirror: [{{upstream: gone}}]}}
"#,
        main.address(),
        shadow.address(),
        stalled_address
    ));
    let c = client();
    // A copy that cannot keep up is cut off; the original goes through.
    let big = vec![b'x'; 64 << 20];
    let reply = send(&c, "POST", &gw.url("/slow-mirror"), &[], big).await;
    assert_eq!(reply.status, 200);
    let cut = r#"wasmgate_route_mirrored_total{route="slow",upstream="stalled",outcome="cut"}"#;
    assert_eq!(crate::common::gateway::metric(&c, &gw, cut).await, 1.0);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let reply = send(&c, "POST", &gw.url("/all"), &[], body.clone()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["upstream"], "main");
    let deadline = Instant::now() + Duration::from_secs(10);
    while shadow.received_bodies("/all").is_empty() {
        assert!(Instant::now() < deadline, "the copy never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shadow.received_bodies("/all")[0], body, "the copy's body");
    assert_eq!(main.received_bodies("/all")[0], body);

    for _ in 0..100 {
        assert_eq!(get(&c, &gw.url("/half")).await.status, 200);
    }
    // Copies are chosen as the originals are handled (request n when n %
    // 100 < 50), so all hundred choices are made by now; wait until the
    // gateway has counted the chosen ones answered.
    let half = r#"wasmgate_route_mirrored_total{route="half",upstream="shadow",outcome="sent"}"#;
    let answered = until_metric(&c, &gw, half, |n| n >= 50.0).await;
    assert_eq!(answered, 50.0, "exactly half");
    assert_eq!(shadow.received("/half").len(), 50, "exactly half");

    assert_eq!(get(&c, &gw.url("/dead")).await.status, 200);
    let failed = r#"wasmgate_route_mirrored_total{route="dead",upstream="gone",outcome="failed"}"#;
    until_metric(&c, &gw, failed, |n| n == 1.0).await;
    let sent = r#"wasmgate_route_mirrored_total{route="all",upstream="shadow",outcome="sent"}"#;
    assert_eq!(crate::common::gateway::metric(&c, &gw, sent).await, 1.0);

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, mirror: [{upstream: nowhere}]}]\n",
    );
    assert!(
        stderr.contains("routes[r].mirror:") && stderr.contains("routes[r].mirror[0].upstream"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_answers_locally_and_skips_the_upstream() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: fault, wasm: "{wasm:fault_injection}"}
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: fault
    plugins:
      - {plugin: fault, conf: {body: "hello world", http_status: 200}}
      - {plugin: h}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    for _ in 0..3 {
        let reply = get(&c, &gw.url("/anything")).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text(), "hello world");
        assert_eq!(reply.header("x-fault"), Some("injected"));
        // The chain ended at the local response: the next filter never ran.
        assert_eq!(reply.header("x-seen-path"), None);
    }
    assert_eq!(up.hits(), 0, "a local response skips the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extism_function_routes_share_the_listener() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: hello, wasm: "{wasm:hello}"}
  - {name: h, wasm: "{wasm:add_header}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: hello, path: {exact: /hello}, function: {plugin: hello, function: hello}}
  - {name: filtered-hello, path: {exact: /filtered/hello}, plugins: [{plugin: h}], function: {plugin: hello}}
  - {name: rest, upstream: backend}
"#,
    )
    .await;
    let c = client();
    let reply = send(&c, "POST", &gw.url("/hello"), &[], "Ada").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Ada"}"#);
    // With a filter in front; the function is named by the last path segment.
    let reply = send(&c, "POST", &gw.url("/filtered/hello"), &[], "Grace").await;
    assert_eq!(reply.text(), r#"{"message":"Hello Grace"}"#);
    assert_eq!(reply.header("x-seen-path"), Some("/filtered/hello"));
    let reply = get(&c, &gw.url("/other")).await;
    assert_eq!(reply.json()["upstream"], "backend");
}

/// CORS: a preflight from an allowed origin (exact or `*.` wildcard) is
/// answered by the gateway with what the route allows, never reaching the
/// upstream; answers to allowed origins carry the origin, credentials and
/// exposed headers (and `Vary: Origin`); another
/// origin, or none, gets nothing added. With `*` origins and no
/// credentials the answer says `*`. `check` refuses an origin that is not
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_and_allowed_origins_marked() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: app
    path: {prefix: /app}
    cors:
      allow_origins: ["https://app.example.com", "https://*.example.org"]
      allow_methods: [GET, PUT]
      allow_headers: [x-token]
      expose_headers: [x-trace]
      max_age_seconds: 600
      allow_credentials: true
    upstream: backend
  - name: public
    path: {prefix: /public}
    cors: {allow_origins: ["*"], allow_methods: ["*"], allow_headers: ["*"]}
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let preflight = send(
        &c,
        "OPTIONS",
        &gw.url("/app/items"),
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-token"),
        ],
        "",
    )
    .await;
    assert_eq!(preflight.status, 204, "{}", preflight.text());
    let got = |reply: &crate::common::Reply, name: &str| {
        reply.header(name).unwrap_or_default().to_string()
    };
    assert_eq!(
        got(&preflight, "access-control-allow-origin"),
        "https://app.example.com"
    );
    assert_eq!(got(&preflight, "access-control-allow-methods"), "GET, PUT");
    assert_eq!(got(&preflight, "access-control-allow-headers"), "x-token");
    assert_eq!(got(&preflight, "access-control-max-age"), "600");
    assert_eq!(got(&preflight, "access-control-allow-credentials"), "true");
    assert_eq!(up.hits(), 0, "a preflight never reaches the upstream");

    let reply = send(
        &c,
        "GET",
        &gw.url("/app/items"),
        &[("origin", "https://shop.example.org")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        got(&reply, "access-control-allow-origin"),
        "https://shop.example.org"
    );
    assert_eq!(got(&reply, "access-control-expose-headers"), "x-trace");
    assert_eq!(got(&reply, "access-control-allow-credentials"), "true");
    assert!(
        got(&reply, "vary").contains("Origin"),
        "{:?}",
        reply.headers
    );
    for origin in [
        "https://evil.example",
        "https://example.org",
        "http://app.example.com",
    ] {
        let reply = send(&c, "GET", &gw.url("/app/items"), &[("origin", origin)], "").await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.header("access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    // Another origin's preflight is the upstream's to answer.
    let hits = up.hits();
    let other = send(
        &c,
        "OPTIONS",
        &gw.url("/app/items"),
        &[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "PUT"),
        ],
        "",
    )
    .await;
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert_eq!(up.hits(), hits + 1);
    let reply = get(&c, &gw.url("/app/items")).await;
    assert_eq!(
        reply.header("access-control-allow-origin"),
        None,
        "no Origin, no CORS"
    );

    let public = send(
        &c,
        "OPTIONS",
        &gw.url("/public"),
        &[
            ("origin", "https://any.example"),
            ("access-control-request-method", "DELETE"),
        ],
        "",
    )
    .await;
    assert_eq!(public.status, 204);
    assert_eq!(got(&public, "access-control-allow-origin"), "*");
    assert_eq!(got(&public, "access-control-allow-methods"), "*");
    assert_eq!(got(&public, "access-control-max-age"), "5");

    let stderr = crate::common::check_refuses(
        "listen: 127.0.0.1:1\nroutes: [{name: r, respond: {status: 200}, cors: {allow_origins: [app.example.com]}}]\n",
    );
    assert!(stderr.contains("routes[r].cors.allow_origins"), "{stderr}");
}
