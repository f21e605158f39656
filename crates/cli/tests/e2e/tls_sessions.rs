//! TLS session resumption never skips a client certificate (docs/security.md,
//! "Client certificates"): a session made on a listener that asks for none
//! does not resume on one that requires one, nor after a reload that
//! tightened the policy. Driven by `openssl s_client`, saving a session and
//! offering it again, as an attacker would.

use crate::common::gateway::{until_generation, GatewayProc};
use crate::common::tls::{certificate, s_client};
use crate::common::{client, free_port};
use wasmgate_testkit::pki::{KeyType, Pki};

const REQUEST: &str = "GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n";

/// `s_client` to `port` as shop.example with `version` (`-tls1_2` or
/// `-tls1_3`), writing its session to `session` (`-sess_out`) or offering
/// the one there (`-sess_in`), sending [`REQUEST`]: what it printed.
fn with_session(port: u16, version: &str, session_flag: &str, session: &str) -> String {
    let (_, text) = s_client(
        port,
        &[
            "-servername",
            "shop.example",
            version,
            "-alpn",
            "http/1.1",
            "-ign_eof",
            session_flag,
            session,
        ],
        REQUEST,
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_a_certificate_never_resumes_where_one_is_required() {
    let pki = Pki::new("wasmgate test CA");
    let shop = pki.server(&["shop.example"], KeyType::EcdsaP256, 1, 1);
    let strict_port = free_port();
    let config = |open_auth: &str| {
        format!(
            r#"
listen: "{{listen}}"
admin: "{{admin}}"
listeners:
  - {{address: "{{tls_listen}}", tls: {{client_auth: {open_auth}, client_ca: "{ca}"}}}}
  - {{address: "127.0.0.1:{strict_port}", tls: {{client_auth: required, client_ca: "{ca}"}}}}
certificates: [{}]
routes:
  - name: all
    path: {{prefix: /}}
    respond: {{status: 200, body: "hello"}}
"#,
            certificate("shop", &shop),
            ca = pki.ca.display(),
        )
    };
    let gw = GatewayProc::start(&config("none"));
    let open_port = gw.tls_port;
    let dir = tempfile::tempdir().unwrap();

    for version in ["-tls1_3", "-tls1_2"] {
        let session = dir.path().join(format!("session{version}.pem"));
        let session = session.to_str().unwrap();
        let text = with_session(open_port, version, "-sess_out", session);
        assert!(text.contains("HTTP/1.1 200 OK"), "{version}: {text}");
        // The control: the session resumes where it was made, so a refusal
        // below is the policy's, not a session openssl could not offer.
        let text = with_session(open_port, version, "-sess_in", session);
        assert!(text.contains("Reused,"), "{version}: {text}");
        assert!(text.contains("HTTP/1.1 200 OK"), "{version}: {text}");

        let text = with_session(strict_port, version, "-sess_in", session);
        assert!(!text.contains("Reused,"), "{version}: {text}");
        assert!(!text.contains("HTTP/1.1 200"), "{version}: {text}");
    }

    // A reload that tightens the open listener: sessions made before it do
    // not resume, and without a certificate nothing is served.
    let sessions: Vec<String> = ["-tls1_3", "-tls1_2"]
        .iter()
        .map(|version| {
            let session = dir.path().join(format!("before-reload{version}.pem"));
            let session = session.to_str().unwrap().to_string();
            let text = with_session(open_port, version, "-sess_out", &session);
            assert!(text.contains("HTTP/1.1 200 OK"), "{version}: {text}");
            session
        })
        .collect();
    gw.rewrite(&config("required"));
    until_generation(&client(), &gw, 2).await;
    for (version, session) in ["-tls1_3", "-tls1_2"].iter().zip(&sessions) {
        let text = with_session(open_port, version, "-sess_in", session);
        assert!(!text.contains("Reused,"), "{version}: {text}");
        assert!(!text.contains("HTTP/1.1 200"), "{version}: {text}");
    }
}
