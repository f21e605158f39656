//! What a filter sees of a request (its properties, both ways' trailers)
//! and what becomes of the requests of a filter that crashes.

use crate::common::client;
use crate::common::gateway::{get, send, with_upstream, GatewayProc, FRAGILE};
use crate::common::upstream::Upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_filters_fail_closed_or_open_and_are_replaced() {
    let up = Upstream::start("backend").await;
    let dir = tempfile::tempdir().unwrap();
    let fragile = dir.path().join("fragile.wat");
    std::fs::write(&fragile, FRAGILE).unwrap();
    let c = client();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
error_details: true   # the filter's callback in the answer, checked below
plugins:
  - {{name: strict, wasm: "{f}", fail: closed, pool_size: 2}}
  - {{name: lenient, wasm: "{f}", fail: open, pool_size: 2}}
upstreams: [{{name: backend, nodes: [{{address: "{up}"}}]}}]
routes:
  - {{name: closed, headers: {{x-mode: closed}}, plugins: [{{plugin: strict}}], upstream: backend}}
  - {{name: open, headers: {{x-mode: open}}, plugins: [{{plugin: lenient}}], upstream: backend}}
"#,
        f = fragile.display(),
        up = up.address()
    ));
    for _ in 0..5 {
        let r = send(&c, "GET", &gw.url("/crash"), &[("x-mode", "closed")], "").await;
        assert_eq!(r.status, 500, "{}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["kind"], "filter_failed");
        assert_eq!(error["plugin"], "strict");
        assert!(error["message"]
            .as_str()
            .unwrap()
            .contains("proxy_on_request_headers"));
        let r = send(&c, "GET", &gw.url("/crash"), &[("x-mode", "open")], "").await;
        assert_eq!(r.status, 200, "fail open lets it through: {}", r.text());
        assert!(r.json()["headers"].get("x-fragile").is_none());
        // Healthy requests right after a crash get a fresh instance.
        let r = send(&c, "GET", &gw.url("/fine"), &[("x-mode", "closed")], "").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["headers"]["x-fragile"], "ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_describe_request_connection_route_and_response() {
    let (up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: props, wasm: "{wasm:properties}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - name: fixed
    path: {prefix: /fixed}
    plugins: [{plugin: props, conf: ["response.code_details", "response.grpc_status:int", "upstream.address"]}]
    respond: {status: 200, body: fixed, headers: {grpc-status: "7"}}
  - name: gone
    path: {prefix: /gone}
    plugins: [{plugin: props, conf: ["response.grpc_status:int", "response.flags:int"]}]
    respond: {status: 404}
  - name: inspected
    plugins:
      - plugin: props
        conf: ["response.code_details", "request.path", "request.url_path", "request.query", "request.method",
               "request.host", "request.scheme", "request.protocol", "request.id",
               "request.time:int", "request.size:int", "request.headers.x-probe",
               "request.referer", "request.useragent", "request.headers:map",
               "request.headers_bytes:int", "request.total_size:int", "request.duration:int",
               "response.code:int", "response.size:int", "response.headers.x-upstream",
               "response.headers:map", "response.headers_bytes:int", "response.grpc_status:int",
               "response.flags:int", "response.trailers:map",
               "source.address", "source.port:int", "destination.address",
               "destination.port:int", "connection.id:int", "connection_id:int", "connection.mtls:bool",
               "connection.tls_version", "plugin_name", "plugin_root_id", "plugin_vm_id", "route_name",
               "cluster_name", "xds.route_name", "xds.cluster_name", "upstream.address",
               "upstream.port:int", "upstream.num_endpoints:int", "no.such.property",
               "log:request.duration:int", "log:response.size:int", "log:response.total_size:int",
               "log:response.headers_bytes:int", "log:response.trailers.x-checksum",
               "log:response.grpc_status:int"]
    upstream: backend
"#,
    )
    .await;
    let c = client();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let r = send(
        &c,
        "POST",
        &gw.url("/a/b?x=1"),
        &[
            ("x-probe", "p1"),
            ("user-agent", "props-test/1"),
            ("referer", "http://example.test/from"),
            ("x-log-as", "first"),
        ],
        "12345",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let p = |name: &str| {
        r.header(&format!("x-property-{name}"))
            .unwrap_or_else(|| panic!("no header for {name}"))
            .to_string()
    };
    let int = |name: &str| -> i64 { p(name).parse().unwrap_or_else(|_| panic!("{name}")) };
    let gw_port = gw.url("").rsplit(':').next().unwrap().to_string();
    assert_eq!(p("request.path"), "/a/b?x=1");
    assert_eq!(p("request.url_path"), "/a/b");
    assert_eq!(p("request.query"), "x=1");
    assert_eq!(p("request.method"), "POST");
    assert_eq!(p("request.host"), format!("127.0.0.1:{gw_port}"));
    assert_eq!(p("request.scheme"), "http");
    assert_eq!(p("request.protocol"), "HTTP/1.1");
    assert_eq!(p("request.id").len(), 16);
    let time = int("request.time");
    assert!(
        (before - 1_000_000_000..before + 60_000_000_000).contains(&time),
        "{time}"
    );
    assert_eq!(p("request.size"), "5");
    assert_eq!(p("request.headers.x-probe"), "p1");
    assert_eq!(p("request.referer"), "http://example.test/from");
    assert_eq!(p("request.useragent"), "props-test/1");
    // The whole map (pseudo-headers included), and Envoy's byte count of
    // it: its names' and values' lengths.
    let request_headers = map(&p("request.headers"));
    assert!(request_headers.contains(&(":method".into(), "POST".into())));
    assert!(request_headers.contains(&("x-probe".into(), "p1".into())));
    let request_bytes = byte_size(&request_headers);
    assert_eq!(int("request.headers_bytes"), request_bytes);
    assert_eq!(int("request.total_size"), request_bytes + 5);
    // Only once the stream is over.
    assert_eq!(p("request.duration"), "<absent>");
    assert_eq!(p("response.code"), "200");
    // The body bytes sent on so far: none while the headers are filtered.
    assert_eq!(p("response.size"), "0");
    assert_eq!(p("response.headers.x-upstream"), "backend");
    let response_headers = map(&p("response.headers"));
    assert!(response_headers.contains(&(":status".into(), "200".into())));
    assert!(response_headers.contains(&("x-upstream".into(), "backend".into())));
    assert_eq!(int("response.headers_bytes"), byte_size(&response_headers));
    // Not a gRPC answer: the status its 200 maps to (UNKNOWN), as Envoy says.
    assert_eq!(p("response.grpc_status"), "2");
    assert_eq!(p("response.flags"), "0");
    assert_eq!(p("response.trailers"), "");
    assert!(p("source.address").starts_with("127.0.0.1:"));
    let source_port: u16 = p("source.port").parse().unwrap();
    assert!(p("source.address").ends_with(&format!(":{source_port}")));
    assert_eq!(p("destination.address"), format!("127.0.0.1:{gw_port}"));
    assert_eq!(p("destination.port"), gw_port);
    assert!(int("connection.id") >= 1);
    assert_eq!(p("connection_id"), p("connection.id"));
    assert_eq!(p("connection.mtls"), "false");
    assert_eq!(p("connection.tls_version"), "<absent>");
    assert_eq!(p("plugin_name"), "props");
    assert_eq!(p("plugin_vm_id"), "props");
    assert_eq!(p("route_name"), "inspected");
    assert_eq!(p("xds.route_name"), "inspected");
    // Envoy's and Higress's form, which Higress's `_match_service_` parses.
    let up_port = up.address().rsplit_once(':').unwrap().1.to_string();
    assert_eq!(p("cluster_name"), format!("outbound|{up_port}||backend"));
    assert_eq!(p("xds.cluster_name"), p("cluster_name"));
    // The node the request went to.
    assert_eq!(p("upstream.address"), up.address());
    assert_eq!(p("upstream.port"), up_port);
    assert_eq!(p("upstream.num_endpoints"), "1");
    assert_eq!(p("no.such.property"), "<absent>");
    // Where the answer came from, in Envoy's words.
    assert_eq!(p("response.code_details"), "via_upstream");

    // What the filter read in `proxy_on_log`, shown on a later request.
    let first = logged(&c, &gw, "first").await;
    let duration: i64 = first["request.duration"].parse().unwrap();
    assert!((1..60_000_000_000).contains(&duration), "{duration}");
    assert_eq!(first["response.size"], r.body.len().to_string());
    let headers_bytes: i64 = first["response.headers_bytes"].parse().unwrap();
    assert_eq!(
        first["response.total_size"],
        (r.body.len() as i64 + headers_bytes).to_string()
    );
    assert_eq!(first["response.trailers.x-checksum"], "<absent>");
    // A response that ends with trailers: they are there by `proxy_on_log`.
    let trailed = send(
        &c,
        "GET",
        &gw.url("/a/trailers"),
        &[("te", "trailers"), ("x-log-as", "trailed")],
        "",
    )
    .await;
    assert_eq!(trailed.text(), "part1 part2");
    let trailed = logged(&c, &gw, "trailed").await;
    assert_eq!(trailed["response.trailers.x-checksum"], "abc123");
    assert_eq!(trailed["response.size"], "11");

    // A route's own answer: no upstream was asked; a gRPC status in its
    // headers (a trailers-only answer) is the one read.
    let fixed = send(&c, "GET", &gw.url("/fixed"), &[], "").await;
    let fixed_property = |name: &str| fixed.header(&format!("x-property-{name}"));
    assert_eq!(
        fixed_property("response.code_details"),
        Some("direct_response")
    );
    assert_eq!(fixed_property("response.grpc_status"), Some("7"));
    assert_eq!(fixed_property("upstream.address"), Some("<absent>"));
    let gone = send(&c, "GET", &gw.url("/gone"), &[], "").await;
    assert_eq!(gone.status, 404);
    // 404 is UNIMPLEMENTED in gRPC's mapping.
    assert_eq!(gone.header("x-property-response.grpc_status"), Some("12"));
    assert_eq!(gone.header("x-property-response.flags"), Some("0"));
    // Each request gets its own id.
    let again = send(&c, "POST", &gw.url("/a/b?x=1"), &[], "").await;
    let id = again.header("x-property-request.id").unwrap();
    assert_ne!(id, p("request.id"));
}

/// A `map` the properties plugin showed (`name=value; ...`).
fn map(shown: &str) -> Vec<(String, String)> {
    shown
        .split("; ")
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, value) = entry.split_once('=').expect("name=value");
            (name.to_string(), value.to_string())
        })
        .collect()
}

/// Envoy's `headers_bytes`: the lengths of the names and values.
fn byte_size(headers: &[(String, String)]) -> i64 {
    headers
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as i64)
        .sum()
}

/// What the properties plugin kept in `proxy_on_log` of the request logged
/// as `key`: asked for until it is there (the log callback of a request
/// may still be running when its client has the response).
async fn logged(
    c: &crate::common::HttpClient,
    gw: &GatewayProc,
    key: &str,
) -> std::collections::HashMap<String, String> {
    for _ in 0..50 {
        let r = send(c, "GET", &gw.url("/show"), &[("x-show-logged", key)], "").await;
        let logged: std::collections::HashMap<String, String> = r
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let path = name.as_str().strip_prefix("x-logged-")?;
                Some((path.to_string(), value.to_str().ok()?.to_string()))
            })
            .collect();
        if !logged.is_empty() {
            return logged;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("nothing logged as {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_through_the_filter() {
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: trailers, wasm: "{wasm:trailers}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: filtered, path: {prefix: /filtered}, plugins: [{plugin: trailers}], upstream: backend}
  - {name: plain, upstream: backend}
"#,
    )
    .await;
    let c = client();
    let te = [("te", "trailers")];
    // Unfiltered: the upstream's trailers reach the client.
    let plain = send(&c, "GET", &gw.url("/trailers"), &te, "").await;
    assert_eq!(plain.text(), "part1 part2");
    let trailers = plain.trailers.expect("trailers through the plain route");
    assert_eq!(trailers["x-checksum"], "abc123");
    // Filtered: proxy_on_response_trailers sees them and rewrites one.
    let filtered = send(&c, "GET", &gw.url("/filtered/trailers"), &te, "").await;
    assert_eq!(filtered.status, 200);
    assert_eq!(filtered.text(), "part1 part2");
    let trailers = filtered.trailers.expect("trailers through the filter");
    assert_eq!(trailers["x-checksum"], "abc123; seen-by=filter; trailers=1");
    // A client that did not say `TE: trailers` gets the body without them.
    let without = get(&c, &gw.url("/filtered/trailers")).await;
    assert_eq!(without.text(), "part1 part2");
    assert!(without.trailers.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_pass_through_the_filter() {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let (_up, gw) = with_upstream(
        "backend",
        r#"
listen: "{listen}"
plugins:
  - {name: trailers, wasm: "{wasm:trailers}"}
upstreams: [{name: backend, nodes: [{address: "{backend}"}]}]
routes:
  - {name: filtered, plugins: [{plugin: trailers}], upstream: backend}
"#,
    )
    .await;
    // A chunked request body that ends with a trailer it declares.
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("x-checksum", "req-42".parse().unwrap());
    let body = StreamBody::new(crate::common::upstream::frames_stream([
        Frame::data(bytes::Bytes::from("one ")),
        Frame::data(bytes::Bytes::from("two")),
        Frame::trailers(trailers),
    ]));
    let request = hyper::Request::post(gw.url("/upload"))
        .header("trailer", "x-checksum")
        .body(body)
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let response = client.request(request).await.unwrap();
    let reply = crate::common::Reply::read(response).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let echo = reply.json();
    assert_eq!(echo["body"], "one two");
    assert_eq!(
        echo["trailers"]["x-checksum"], "req-42; seen-by=filter; trailers=1",
        "{echo}"
    );
}
