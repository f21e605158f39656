//! TLS to upstreams: verified against a CA file or PEM text, kept alive,
//! offering HTTP/1.1 by ALPN; an untrusted node answered with 502 and its
//! reason logged; the gateway's client certificate for an mTLS upstream.

use crate::common::client;
use crate::common::gateway::{metric, send, GatewayProc};
use wasmgate_testkit::pki::{KeyType, Pki};

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
