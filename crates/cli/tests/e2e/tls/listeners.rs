//! HTTPS listeners: SNI choosing the certificate, ALPN the protocol, filters
//! seeing the connection; h2spec over TLS; plain HTTP redirected to HTTPS.

use crate::common::client;
use crate::common::gateway::{metric, send, with_upstream, GatewayProc};
use crate::common::tls::{certificate, curl, s_client};
use std::path::Path;
use std::process::Command;
use wasmgate_testkit::pki::{KeyType, Pki};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_the_certificate_alpn_the_protocol_and_filters_see_the_connection() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 11, 1);
    let api = pki.server(&["*.api.example"], KeyType::Rsa2048, 12, 1);
    let (_upstream, gw) = with_upstream(
        "backend",
        &format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{}}}}
certificates:
  - {}
  - {}
upstreams:
  - {{name: backend, nodes: [{{address: "{{backend}}"}}]}}
plugins:
  - {{name: props, wasm: "{{wasm:properties}}"}}
routes:
  - name: echo
    path: {{prefix: /}}
    plugins:
      - plugin: props
        conf: ["connection.tls_version", "connection.requested_server_name", "request.scheme", "connection.mtls:bool", "connection.subject_peer_certificate"]
    upstream: backend
"#,
            certificate("shop", &shop),
            certificate("api", &api)
        ),
    )
    .await;
    let port = gw.tls_port;

    // curl: HTTP/2 by ALPN, HTTP/1.1 when it offers only that; what the
    // filter and the upstream see.
    let h2 = curl("shop.example", port, "/hello", &pki.ca, &[]);
    assert!(h2.ok, "{}", h2.stderr);
    assert_eq!((h2.status, h2.version.as_str()), (200, "2"));
    assert_eq!(
        h2.header("x-property-connection.tls_version").as_deref(),
        Some("TLSv1.3")
    );
    assert_eq!(
        h2.header("x-property-connection.requested_server_name")
            .as_deref(),
        Some("shop.example")
    );
    assert_eq!(
        h2.header("x-property-request.scheme").as_deref(),
        Some("https")
    );
    assert_eq!(
        h2.header("x-property-connection.mtls").as_deref(),
        Some("false")
    );
    // Empty without a client certificate (which the SDK reports as absent).
    assert_eq!(
        h2.header("x-property-connection.subject_peer_certificate")
            .as_deref(),
        Some("<absent>")
    );
    let echo: serde_json::Value = serde_json::from_str(&h2.body).unwrap();
    assert_eq!(echo["headers"]["x-forwarded-proto"], "https", "{echo}");
    let h1 = curl("shop.example", port, "/hello", &pki.ca, &["--http1.1"]);
    assert_eq!(
        (h1.status, h1.version.as_str()),
        (200, "1.1"),
        "{}",
        h1.stderr
    );
    // Over TLS 1.2 the filter reads that version.
    let tls12 = curl(
        "shop.example",
        port,
        "/hello",
        &pki.ca,
        &["--tls-max", "1.2"],
    );
    assert_eq!(tls12.status, 200, "{}", tls12.stderr);
    assert_eq!(
        tls12.header("x-property-connection.tls_version").as_deref(),
        Some("TLSv1.2")
    );

    // The certificate by SNI: exact, wildcard (one label only), default.
    let served = |args: &[&str]| {
        let (ok, text) = s_client(
            port,
            &[&["-CAfile", pki.ca.to_str().unwrap()], args].concat(),
            "",
        );
        assert!(ok, "{text}");
        assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
        text
    };
    let text = served(&["-servername", "shop.example"]);
    assert!(text.contains("subject=CN = shop.example"), "{text}");
    assert!(text.contains("Server public key is 256 bit"), "{text}");
    let text = served(&["-servername", "v1.api.example"]);
    assert!(text.contains("subject=CN = *.api.example"), "{text}");
    assert!(text.contains("Server public key is 2048 bit"), "{text}");
    let text = served(&["-servername", "V2.API.example"]);
    assert!(text.contains("subject=CN = *.api.example"), "{text}");
    for unknown in [&["-servername", "a.b.api.example"][..], &["-noservername"]] {
        let (ok, text) = s_client(port, unknown, "");
        assert!(ok, "{text}");
        assert!(
            text.contains("subject=CN = shop.example"),
            "the default: {text}"
        );
    }

    // Versions: 1.2 and 1.3; ALPN both ways.
    for (flag, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let text = served(&["-servername", "shop.example", flag]);
        assert!(
            text.contains(&format!("New, {version}, Cipher is")),
            "{text}"
        );
    }
    for protocol in ["h2", "http/1.1"] {
        let text = served(&["-servername", "shop.example", "-alpn", protocol]);
        assert!(
            text.contains(&format!("ALPN protocol: {protocol}")),
            "{text}"
        );
    }

    // Resumption: TLS 1.2 by the session cache or a ticket (s_client's five
    // reconnections), TLS 1.3 by a ticket saved and offered again.
    let text = served(&["-servername", "shop.example", "-tls1_2", "-reconnect"]);
    assert_eq!(text.matches("Reused, TLSv1.2").count(), 5, "{text}");
    let dir = tempfile::tempdir().unwrap();
    let session = dir.path().join("session.pem");
    let request = "GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n";
    let tls13 = [
        "-servername",
        "shop.example",
        "-tls1_3",
        "-alpn",
        "http/1.1",
        "-ign_eof",
    ];
    let (ok, text) = s_client(
        port,
        &[&tls13[..], &["-sess_out", session.to_str().unwrap()]].concat(),
        request,
    );
    assert!(ok && text.contains("New, TLSv1.3"), "{text}");
    let (ok, text) = s_client(
        port,
        &[&tls13[..], &["-sess_in", session.to_str().unwrap()]].concat(),
        request,
    );
    assert!(ok && text.contains("Reused, TLSv1.3"), "{text}");
    assert!(text.contains("HTTP/1.1 200 OK"), "{text}");
    let c = client();
    assert_eq!(
        metric(&c, &gw, "wasmgate_tls_handshakes_total{kind=\"resumed\"}").await,
        6.0
    );
    assert!(metric(&c, &gw, "wasmgate_tls_handshakes_total{kind=\"full\"}").await >= 12.0);

    // Operators see the certificates with their names and expiry.
    let status = send(&c, "GET", &gw.admin_url("/status"), &[], "")
        .await
        .json();
    let certificates = status["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 2, "{status}");
    assert_eq!(certificates[1]["name"], "api");
    assert_eq!(certificates[1]["names"][0], "*.api.example");
    let expires = certificates[0]["not_after"].as_i64().unwrap();
    let in_a_day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 86_400;
    assert!((expires - in_a_day).abs() < 600, "{status}");
    assert_eq!(
        metric(
            &c,
            &gw,
            "wasmgate_tls_certificate_expiry_timestamp_seconds{certificate=\"shop\"}"
        )
        .await,
        expires as f64
    );
    assert_eq!(status["listeners"][1]["tls"], true, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_on_the_tls_listener() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{}}}}
certificates: [{}]
routes:
  - {{name: all, path: {{prefix: /}}, respond: {{status: 200, body: "hello"}}}}
"#,
        certificate("shop", &shop)
    ));
    let h2spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-bin/h2spec");
    assert!(
        h2spec.exists(),
        "{} is missing: run scripts/install-deps.sh",
        h2spec.display()
    );
    let out = Command::new(&h2spec)
        .args(["-t", "-k", "-h", "127.0.0.1", "-o", "5", "-p"])
        .arg(gw.tls_port.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default();
    assert!(
        out.status.success() && summary.ends_with(" 0 failed"),
        "{text}"
    );
    assert!(summary.starts_with("145 tests, 145 passed"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_is_redirected_to_https_by_one_line_of_route_config() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let tls_port = crate::common::free_port();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
listeners:
  - {{address: "127.0.0.1:{tls_port}", tls: {{}}}}
certificates: [{}]
routes:
  - {{name: to-https, scheme: http, redirect: {{scheme: https, port: {tls_port}}}}}
  - {{name: site, path: {{prefix: /}}, respond: {{status: 200, body: "secure"}}}}
"#,
        certificate("shop", &shop)
    ));
    let c = client();
    let r = send(
        &c,
        "GET",
        &gw.url("/cart?item=7"),
        &[("host", "shop.example")],
        "",
    )
    .await;
    assert_eq!(r.status, 301, "{}", r.text());
    assert_eq!(
        r.headers["location"],
        format!("https://shop.example:{tls_port}/cart?item=7").as_str()
    );
    // Followed by curl, it ends on the TLS listener, where `scheme: http`
    // does not match: no loop.
    let out = Command::new("curl")
        .args(["-sS", "-L", "--max-time", "10", "--resolve"])
        .arg(format!("shop.example:{}:127.0.0.1", gw.port))
        .args(["--resolve", &format!("shop.example:{tls_port}:127.0.0.1")])
        .arg("--cacert")
        .arg(&pki.ca)
        .args(["-w", " %{url_effective} %{num_redirects}"])
        .arg(format!("http://shop.example:{}/cart?item=7", gw.port))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("secure https://shop.example:{tls_port}/cart?item=7 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
