//! Clients of a TLS listener: bad ones refused and counted while everyone
//! else is served, and client certificates verified when the listener asks.

use super::failures;
use crate::common::gateway::{send, until_generation, GatewayProc};
use crate::common::tls::{certificate, curl, s_client};
use crate::common::{client, raw_exchange};
use sha2::Digest;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use wasmgate_testkit::pki::{Issued, KeyType, Pki};

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
    let plain = b"GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n";
    let answer = raw_exchange(port, plain, Duration::from_secs(10)).unwrap();
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
        conf: ["connection.mtls:bool", "connection.subject_peer_certificate", "connection.uri_san_peer_certificate",
               "connection.dns_san_peer_certificate", "connection.sha256_peer_certificate_digest",
               "connection.peer_certificate"]
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
    // The certificate itself, as Envoy gives it: its SHA-256 (of the DER)
    // in hex, and its PEM URL-encoded; it has no DNS name.
    assert!(
        answer.contains("x-property-connection.dns_san_peer_certificate: <absent>"),
        "{answer}"
    );
    let property = |name: &str| {
        let prefix = format!("x-property-connection.{name}: ");
        answer
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in {answer}"))
            .to_string()
    };
    let pem = payments.cert_pem();
    let der = pem_body(&pem);
    let digest = sha2::Sha256::digest(&der);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(property("sha256_peer_certificate_digest"), hex);
    let encoded = property("peer_certificate");
    assert!(
        encoded.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
        "{encoded}"
    );
    assert_eq!(pem_body(&percent_decoded(&encoded)), der);
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

/// The DER inside a PEM certificate.
fn pem_body(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .skip_while(|line| !line.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|line| !line.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64")
}

/// `%XX` escapes undone.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
