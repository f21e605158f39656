//! HTTPS listeners and TLS to upstreams (docs/tls.md), driven by the tools
//! users check a TLS server with: certificates made at test time by
//! `openssl` (wasmgate-testkit's `Pki`), `curl --resolve` for SNI and HTTP/2
//! by ALPN, `openssl s_client` for versions, ALPN and resumption, Python's
//! `ssl` for client certificates, h2spec for HTTP/2 over TLS; and a TLS
//! client of the test's own (rustls) for a certificate replaced under load.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::gateway::{metric, send, until_generation, with_upstream, GatewayProc};
use crate::common::tls::{certificate, curl, s_client};
use crate::common::{client, HttpClient};
use wasmgate_testkit::pki::{Issued, KeyType, Pki};

async fn failures(c: &HttpClient, gw: &GatewayProc, reason: &str) -> f64 {
    metric(
        c,
        gw,
        &format!("wasmgate_tls_handshake_failures_total{{reason=\"{reason}\"}}"),
    )
    .await
}

/// Waits until a reload has been rejected with an error containing `text`.
async fn until_rejected(c: &HttpClient, gw: &GatewayProc, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = send(c, "GET", &gw.admin_url("/status"), &[], "")
            .await
            .json();
        if let Some(error) = status["reload"]["last_error"].as_str() {
            if error.contains(text) {
                return error.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no rejected reload with `{text}`: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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
async fn bad_clients_are_refused_counted_and_everyone_else_served() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{unknown_sni: refuse, handshake_timeout_ms: 500}}}}
certificates: [{}]
routes:
  - {{name: all, path: {{prefix: /}}, respond: {{status: 200, body: "hello"}}}}
"#,
        certificate("shop", &shop)
    ));
    let port = gw.tls_port;
    let c = client();

    // A client that connects and says nothing: the others are served
    // meanwhile, and it is cut off at the deadline.
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    let served = curl("shop.example", port, "/", &pki.ca, &[]);
    assert_eq!(
        (served.status, served.body.as_str()),
        (200, "hello"),
        "{}",
        served.stderr
    );
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    use std::io::{Read, Write};
    let mut buf = [0u8; 64];
    assert_eq!(stalled.read(&mut buf).unwrap(), 0, "closed");
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
    // One that stalls in the middle of its ClientHello (a record header
    // announcing 512 bytes, then the first few of them): cut off too.
    let mut halfway = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    halfway
        .write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        .unwrap();
    halfway
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(halfway.read(&mut buf).unwrap(), 0, "closed");
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );

    // Plain HTTP on the TLS port: an alert, then the connection closes.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n")
        .unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert_eq!(
        answer.first(),
        Some(&0x15),
        "a TLS alert record: {answer:?}"
    );

    // Old versions, weak ciphers, a name no certificate has, no name: each
    // refused with the alert that says why, as OpenSSL reports it.
    let weak = "DEFAULT@SECLEVEL=0";
    for (refused, alert) in [
        (
            &["-servername", "shop.example", "-tls1", "-cipher", weak][..],
            "alert number 70",
        ),
        (
            &["-servername", "shop.example", "-tls1_1", "-cipher", weak],
            "alert number 70",
        ),
        (
            &[
                "-servername",
                "shop.example",
                "-tls1_2",
                "-cipher",
                "AES128-SHA:DES-CBC3-SHA:RC4-SHA@SECLEVEL=0",
            ],
            "alert number 40",
        ),
        (&["-servername", "unknown.example"], "alert number 112"),
        (
            &["-servername", "unknown.example", "-tls1_2"],
            "alert number 112",
        ),
        (&["-noservername"], "alert number 40"),
        // An IP address as SNI is no name (RFC 6066), and no warning in the
        // node's log per handshake.
        (&["-servername", "127.0.0.1"], "alert number 40"),
    ] {
        let (ok, text) = s_client(port, refused, "");
        assert!(!ok, "{refused:?} was accepted: {text}");
        assert!(text.contains(alert), "{refused:?}: not {alert}: {text}");
    }
    for (reason, n) in [
        ("timeout", 2.0),
        ("not_tls", 1.0),
        ("protocol_version", 2.0),
        ("no_shared_cipher", 1.0),
        ("unknown_sni", 4.0),
        ("client_certificate", 0.0),
        ("other", 0.0),
    ] {
        assert_eq!(failures(&c, &gw, reason).await, n, "{reason}");
    }
    let served = curl("shop.example", port, "/", &pki.ca, &["--http1.1"]);
    assert_eq!(served.status, 200, "{}", served.stderr);
    assert!(!gw.logs().contains("Illegal SNI"), "{}", gw.logs());

    // Prometheus reads the TLS families as they are written.
    let text = send(&c, "GET", &gw.admin_url("/metrics"), &[], "")
        .await
        .text();
    let (passed, checked) = crate::common::promtool(&text);
    assert!(passed, "{checked}");
}

/// A client certificate presented from Python's `ssl` (OpenSSL): the status
/// line and headers of the answer, or `refused: <why>`.
fn python_https(port: u16, ca: &Path, client: Option<&Issued>) -> String {
    const SCRIPT: &str = r#"
import socket, ssl, sys
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
context = ssl.create_default_context(cafile=ca)
if cert:
    context.load_cert_chain(cert, key)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="shop.example") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
            answer = b""
            while True:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                answer += chunk
    print(answer.split(b"\r\n\r\n")[0].decode())
except (ssl.SSLError, ConnectionError) as e:
    print("refused:", e)
"#;
    let (cert, key) = client
        .map(|c| (c.cert.display().to_string(), c.key.display().to_string()))
        .unwrap_or_default();
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(port.to_string())
        .arg(ca)
        .args([cert, key])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_verified_when_the_listener_asks() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let payments = pki.client("payments", "spiffe://wasmgate.test/payments");
    let stranger_ca = Pki::new("another CA");
    let stranger = stranger_ca.client("payments", "spiffe://wasmgate.test/payments");
    let config = |auth: &str| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{client_auth: {auth}, client_ca: "{}"}}}}
certificates: [{}]
plugins:
  - {{name: props, wasm: "{{wasm:properties}}"}}
routes:
  - name: all
    path: {{prefix: /}}
    plugins:
      - plugin: props
        conf: ["connection.mtls:bool", "connection.subject_peer_certificate", "connection.uri_san_peer_certificate"]
    respond: {{status: 200, body: "hello"}}
"#,
            pki.ca.display(),
            certificate("shop", &shop)
        )
    };
    let gw = GatewayProc::start(&config("required"));
    let port = gw.tls_port;
    let c = client();

    let answer = python_https(port, &pki.ca, Some(&payments));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("x-property-connection.mtls: true"),
        "{answer}"
    );
    assert!(
        answer.contains(
            "x-property-connection.subject_peer_certificate: O=wasmgate tests,CN=payments"
        ),
        "{answer}"
    );
    assert!(
        answer.contains(
            "x-property-connection.uri_san_peer_certificate: spiffe://wasmgate.test/payments"
        ),
        "{answer}"
    );
    for refused in [None, Some(&stranger)] {
        let answer = python_https(port, &pki.ca, refused);
        assert!(answer.starts_with("refused:"), "{answer}");
    }
    assert_eq!(failures(&c, &gw, "client_certificate").await, 2.0);

    // Made optional by a reload: a client without a certificate is served,
    // one with a certificate is still verified.
    gw.rewrite(&config("optional"));
    until_generation(&c, &gw, 2).await;
    let answer = python_https(port, &pki.ca, None);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("x-property-connection.mtls: false"),
        "{answer}"
    );
    let answer = python_https(port, &pki.ca, Some(&payments));
    assert!(
        answer.contains("x-property-connection.mtls: true"),
        "{answer}"
    );
    let answer = python_https(port, &pki.ca, Some(&stranger));
    assert!(answer.starts_with("refused:"), "{answer}");
}

/// One request on a new TLS connection (a full handshake each time) to
/// `port` as `shop.example`: the status and the certificate served.
async fn new_connection_request(
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> Result<(u16, Vec<u8>), String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("shop.example").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = hyper::Request::get("/")
        .header("host", "shop.example")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok((response.status().as_u16(), leaf))
}

fn trusting(ca: &Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

fn der(issued: &Issued) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_file(&issued.cert)
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_replaced_under_load_fails_no_request() {
    let pki = Pki::new("wasmgate test CA");
    let old = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let new = pki.server(&["shop.example"], KeyType::Rsa2048, 2, 2);
    let other = pki.server(&["shop.example"], KeyType::EcdsaP256, 3, 1);
    // The gateway reads the certificate from files of its own that the
    // test replaces as a renewal tool would.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("shop.pem"), dir.path().join("shop-key.pem"));
    std::fs::copy(&old.cert, &cert).unwrap();
    std::fs::copy(&old.key, &key).unwrap();
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{}}}}
certificates:
  - {{name: shop, cert: "{}", key: "{}"}}
routes:
  - {{name: all, path: {{prefix: /}}, respond: {{status: 200, body: "hello"}}}}
"#,
        cert.display(),
        key.display()
    ));
    let port = gw.tls_port;
    let c = client();
    let config = trusting(&pki.ca);
    assert_eq!(
        new_connection_request(port, config.clone()).await,
        Ok((200, der(&old)))
    );

    // A keep-alive connection made before the change.
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("shop.example").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut kept, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);

    // Load: new connections, one request each, from 4 tasks.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done, failed, saw_new) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(std::sync::Mutex::new(Vec::new())),
        Arc::new(AtomicU64::new(0)),
    );
    let new_der = Arc::new(der(&new));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (stop, done, failed, saw_new, config, new_der) = (
            stop.clone(),
            done.clone(),
            failed.clone(),
            saw_new.clone(),
            config.clone(),
            new_der.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match new_connection_request(port, config.clone()).await {
                    Ok((200, leaf)) => {
                        if leaf == *new_der {
                            saw_new.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    other => failed.lock().unwrap().push(format!("{other:?}")),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while done.load(Ordering::Relaxed) < 50 {
        assert!(Instant::now() < deadline, "the load never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Renewal: the key first, then the certificate, each written in place.
    // In between the pair does not match: that reload is refused, naming
    // the files, and the old pair keeps serving.
    std::fs::write(&key, std::fs::read(&new.key).unwrap()).unwrap();
    let error = until_rejected(&c, &gw, "do not match").await;
    assert!(
        error.contains("shop-key.pem") && error.contains("shop.pem"),
        "{error}"
    );
    let before = done.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while done.load(Ordering::Relaxed) < before + 30 {
        assert!(Instant::now() < deadline, "the load stopped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(saw_new.load(Ordering::Relaxed), 0);
    std::fs::write(&cert, std::fs::read(&new.cert).unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while saw_new.load(Ordering::Relaxed) < 30 {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}",
        failed.len(),
        done.load(Ordering::Relaxed),
        &failed[..failed.len().min(5)]
    );
    // New handshakes get the new certificate; the old connection still works.
    assert_eq!(
        new_connection_request(port, config.clone()).await,
        Ok((200, der(&new)))
    );
    let request = hyper::Request::get("/")
        .header("host", "shop.example")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert_eq!(kept.send_request(request).await.unwrap().status(), 200);

    // A file that is not a certificate at all: refused, named, old kept.
    std::fs::write(&cert, "not a certificate").unwrap();
    let error = until_rejected(&c, &gw, "shop.pem").await;
    assert!(error.contains("certificates[shop]"), "{error}");
    assert_eq!(
        new_connection_request(port, config.clone()).await,
        Ok((200, der(&new)))
    );
    // And a valid pair of another certificate is picked up as well.
    std::fs::write(&key, std::fs::read(&other.key).unwrap()).unwrap();
    std::fs::write(&cert, std::fs::read(&other.cert).unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while new_connection_request(port, config.clone()).await != Ok((200, der(&other))) {
        assert!(
            Instant::now() < deadline,
            "the third certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_are_reached_over_verified_tls() {
    let pki = Pki::new("wasmgate test CA");
    let backend_cert = pki.server(&["backend.internal"], KeyType::EcdsaP256, 5, 1);
    let upstream = crate::common::upstream::Upstream::start_tls(
        "secure",
        &backend_cert.cert,
        &backend_cert.key,
        None,
    )
    .await;
    let wrong_ca = Pki::new("a CA the upstream's certificate is not from");
    // An upstream that wants the gateway's client certificate (mTLS).
    let gateway_identity = pki.client("gateway", "spiffe://wasmgate.test/gateway");
    let strict = crate::common::upstream::Upstream::start_tls(
        "strict",
        &backend_cert.cert,
        &backend_cert.key,
        Some(&pki.ca),
    )
    .await;
    let gw = GatewayProc::start(&format!(
        r#"
listen: "{{listen}}"
admin: "{{admin}}"
upstreams:
  - name: verified
    nodes: [{{address: "{backend}"}}]
    tls: {{sni: backend.internal, ca_file: "{ca}"}}
  - name: inline-ca
    nodes: [{{address: "{backend}"}}]
    tls: {{sni: backend.internal, ca_pem: {ca_pem:?}}}
  - name: wrong-ca
    nodes: [{{address: "{backend}"}}]
    tls: {{sni: backend.internal, ca_file: "{wrong}"}}
  - name: wrong-name
    nodes: [{{address: "{backend}"}}]
    tls: {{sni: other.internal, ca_file: "{ca}"}}
  - name: plain-to-tls
    nodes: [{{address: "{backend}"}}]
  - name: mtls
    nodes: [{{address: "{strict}"}}]
    tls: {{sni: backend.internal, ca_file: "{ca}", client_cert: "{client_cert}", client_key: "{client_key}"}}
  - name: mtls-without-certificate
    nodes: [{{address: "{strict}"}}]
    tls: {{sni: backend.internal, ca_file: "{ca}"}}
routes:
  - {{name: mtls, path: {{prefix: /mtls}}, upstream: mtls}}
  - {{name: mtls-without-certificate, path: {{prefix: /anonymous}}, upstream: mtls-without-certificate}}
  - {{name: verified, path: {{prefix: /verified}}, upstream: verified}}
  - {{name: inline-ca, path: {{prefix: /inline-ca}}, upstream: inline-ca}}
  - {{name: wrong-ca, path: {{prefix: /wrong-ca}}, upstream: wrong-ca}}
  - {{name: wrong-name, path: {{prefix: /wrong-name}}, upstream: wrong-name}}
  - {{name: plain, path: {{prefix: /plain}}, upstream: plain-to-tls}}
"#,
        backend = upstream.address(),
        strict = strict.address(),
        client_cert = gateway_identity.cert.display(),
        client_key = gateway_identity.key.display(),
        ca = pki.ca.display(),
        ca_pem = std::fs::read_to_string(&pki.ca).unwrap(),
        wrong = wrong_ca.ca.display()
    ));
    let c = client();
    // The CA as PEM text (as Kubernetes ConfigMaps give it) does the same.
    let r = send(&c, "GET", &gw.url("/inline-ca/x"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let refused = crate::common::check_refuses(&format!(
        "listen: 127.0.0.1:1\nupstreams: [{{name: u, nodes: [{{address: \"127.0.0.1:2\"}}], tls: {{ca_file: a.pem, ca_pem: {:?}}}}}]\n",
        "x"
    ));
    assert!(refused.contains("ca_file or ca_pem"), "{refused}");
    for i in 0..5 {
        let r = send(&c, "GET", &gw.url(&format!("/verified/{i}")), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["path"], format!("/verified/{i}"));
    }
    // Keep-alive over TLS: the five requests shared a connection. (Two at
    // most: a connection goes back to its pool once the gateway has read
    // its answer's end, which the client's next request can overtake on a
    // busy machine; a full parallel run once saw that.)
    let connections = metric(
        &c,
        &gw,
        &format!(
            "wasmgate_upstream_node_connections{{upstream=\"verified\",node=\"{}\"}}",
            upstream.address()
        ),
    )
    .await;
    assert!(
        (1.0..=2.0).contains(&connections),
        "{connections} connections for 5 requests"
    );
    // ALPN offered HTTP/1.1 alone (the node prefers h2, and would have
    // chosen it had it been offered).
    let chosen = upstream.alpn();
    assert!(
        chosen.len() >= 2 && chosen.iter().all(|p| p == "http/1.1"),
        "{chosen:?}"
    );
    for path in ["/wrong-ca", "/wrong-name"] {
        let r = send(&c, "GET", &gw.url(path), &[], "").await;
        assert_eq!(r.status, 502, "{path}: {}", r.text());
        assert_eq!(
            r.json()["error"]["kind"],
            "upstream_tls",
            "{path}: {}",
            r.text()
        );
    }
    // Both failures' lines (written just after their answers).
    let logged = gw.logs_with(&[
        "UnknownIssuer",
        "certificate not valid for name \"other.internal\"",
    ]);
    assert!(
        logged.contains("kind=\"upstream_tls\"") || logged.contains("kind=upstream_tls"),
        "{logged}"
    );
    // mTLS to the upstream: with the gateway's certificate; without it the
    // node refuses (after the handshake, in TLS 1.3: so not `upstream_tls`).
    let r = send(&c, "GET", &gw.url("/mtls/x"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(strict.hits(), 1);
    let r = send(&c, "GET", &gw.url("/anonymous"), &[], "").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(strict.hits(), 1);
    // Plain HTTP to a TLS node is not TLS: no answer it could trust.
    let r = send(&c, "GET", &gw.url("/plain"), &[], "").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        upstream.hits(),
        6,
        "five verified, one through the inline CA"
    );
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
