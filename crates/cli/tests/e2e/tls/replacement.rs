//! A listener's certificate replaced under load, checked by a TLS client of
//! the test's own (rustls) that opens a new connection per request.

use crate::common::gateway::{send, GatewayProc};
use crate::common::{client, HttpClient};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmgate_testkit::pki::{Issued, KeyType, Pki};

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
