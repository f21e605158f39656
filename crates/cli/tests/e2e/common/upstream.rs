//! A real HTTP upstream for gateway tests, served in-process by hyper.
//!
//! - `/bytes/1`: one byte, even (2) when the request's `x-token` is `allow`,
//!   odd (1) otherwise (what http_auth_random asks for);
//! - `/secret`: a body containing `secret`;
//! - `/slow`: answers after two seconds;
//! - `/stream`: three chunks, 100 ms apart;
//! - `/file/<absolute path>`: that file's bytes (a module "published" at a URL);
//! - `/v1/chat/completions`: an OpenAI-style chat model that answers `echo:
//!   <last message>` with the model it was asked for, whole or (`"stream":
//!   true`) as server-sent events, as OpenAI's API does;
//! - anything else: a JSON echo of the request (method, path, headers, body).
//!
//! Every response carries `x-upstream: <name>`; requests are counted.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

pub struct Upstream {
    pub port: u16,
    ip: String,
    pub hits: Arc<AtomicUsize>,
    /// The last requests' paths and headers (at most [`KEPT`]).
    received: Received,
    task: tokio::task::JoinHandle<()>,
    /// Open connections, closed on drop so the node really goes away.
    connections: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    /// Over TLS: the protocol ALPN chose for each connection ("" for none).
    alpn: Arc<std::sync::Mutex<Vec<String>>>,
}

type Received =
    Arc<std::sync::Mutex<std::collections::VecDeque<(String, hyper::HeaderMap, Bytes)>>>;

/// How many requests an upstream remembers.
const KEPT: usize = 100;

impl Upstream {
    pub async fn start(name: &str) -> Upstream {
        Upstream::serve(name, None, "127.0.0.1").await
    }

    /// The same on address `ip` (an interface's, where a loopback address
    /// will not do: Kubernetes EndpointSlices refuse 127.0.0.0/8).
    pub async fn start_on(name: &str, ip: &str) -> Upstream {
        Upstream::serve(name, None, ip).await
    }

    /// The same upstream over TLS (HTTP/1.1), serving the certificate
    /// `cert` (a PEM chain) with `key`; with `client_ca`, only to clients
    /// with a certificate from it.
    pub async fn start_tls(
        name: &str,
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> Upstream {
        Upstream::start_tls_on(name, "127.0.0.1", cert, key, client_ca).await
    }

    /// The same on address `ip`.
    pub async fn start_tls_on(
        name: &str,
        ip: &str,
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> Upstream {
        use rustls::pki_types::pem::PemObject;
        let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
                    roots.add(cert.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).unwrap();
        // h2 first, as a server that speaks both prefers it; but this one
        // serves HTTP/1.1 only, so a client that offered h2 fails here.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Upstream::serve(
            name,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            ip,
        )
        .await
    }

    async fn serve(name: &str, tls: Option<tokio_rustls::TlsAcceptor>, ip: &str) -> Upstream {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let received = Received::default();
        let (name, counter, log) = (Arc::<str>::from(name), hits.clone(), received.clone());
        let connections = Arc::new(std::sync::Mutex::new(Vec::new()));
        let open = connections.clone();
        let alpn = Arc::new(std::sync::Mutex::new(Vec::new()));
        let chosen = alpn.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                // As servers of streams do (Nagle's algorithm would hold a
                // small chunk written after the head until the gateway's
                // delayed ACK, up to 40 ms).
                let _ = stream.set_nodelay(true);
                let (name, counter, tls) = (name.clone(), counter.clone(), tls.clone());
                let (log, chosen) = (log.clone(), chosen.clone());
                let connection = tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        counter.fetch_add(1, Ordering::SeqCst);
                        answer(name.clone(), request, log.clone())
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => http.serve_connection(TokioIo::new(stream), service).await,
                        Some(tls) => match tls.accept(stream).await {
                            Ok(stream) => {
                                let protocol = stream.get_ref().1.alpn_protocol();
                                chosen.lock().unwrap().push(
                                    String::from_utf8_lossy(protocol.unwrap_or_default())
                                        .into_owned(),
                                );
                                http.serve_connection(TokioIo::new(stream), service).await
                            }
                            Err(_) => return, // a client that did not trust us
                        },
                    };
                });
                open.lock().unwrap().push(connection.abort_handle());
            }
        });
        Upstream {
            port,
            ip: ip.to_string(),
            hits,
            received,
            task,
            connections,
            alpn,
        }
    }

    /// Over TLS: the protocol ALPN chose on each connection so far.
    pub fn alpn(&self) -> Vec<String> {
        self.alpn.lock().unwrap().clone()
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// The headers of the last requests to `path` it received, oldest first.
    pub fn received(&self, path: &str) -> Vec<hyper::HeaderMap> {
        let log = self.received.lock().unwrap();
        log.iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, headers, _)| headers.clone())
            .collect()
    }

    /// The paths and headers of the last requests it received, oldest first.
    pub fn received_all(&self) -> Vec<(String, hyper::HeaderMap)> {
        let log = self.received.lock().unwrap();
        log.iter()
            .map(|(path, headers, _)| (path.clone(), headers.clone()))
            .collect()
    }

    /// The bodies of the last requests to `path` it received, oldest first.
    pub fn received_bodies(&self, path: &str) -> Vec<Bytes> {
        let log = self.received.lock().unwrap();
        log.iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, _, body)| body.clone())
            .collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The answer to `request`, which is recorded in `log` once its body is in.
async fn answer(
    name: Arc<str>,
    request: Request<Incoming>,
    log: Received,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let (body, request_trailers) = match body.collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned().unwrap_or_default();
            (collected.to_bytes(), trailers)
        }
        Err(_) => Default::default(),
    };
    {
        let mut log = log.lock().unwrap();
        if log.len() == KEPT {
            log.pop_front();
        }
        let path = parts.uri.path().to_string();
        log.push_back((path, parts.headers.clone(), body.clone()));
    }
    let path = parts.uri.path().to_string();
    if let Some(file) = path.strip_prefix("/file/") {
        let bytes = std::fs::read(format!("/{file}")).unwrap_or_default();
        return Ok(Response::new(full(bytes)));
    }
    let body: Body = match path.as_str() {
        "/bytes/1" => {
            let allow = parts.headers.get("x-token").is_some_and(|v| v == "allow");
            full(vec![if allow { 2u8 } else { 1u8 }])
        }
        "/secret" => full("this has a secret inside"),
        // The same body, 100 ms after the head (a channel the sender
        // fills late): the gateway cannot have it with the head.
        "/secret/late" => {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from("this has a secret inside"))))
                    .await;
            });
            StreamBody::new(Receiver(rx)).boxed()
        }
        "/v1/chat/completions" => {
            let (body, streamed) = openai_chat(&body);
            let mut response = Response::new(body);
            let kind = if streamed {
                "text/event-stream"
            } else {
                "application/json"
            };
            let headers = response.headers_mut();
            headers.insert("content-type", kind.parse().unwrap());
            headers.insert("x-upstream", name.parse().unwrap());
            return Ok(response);
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            full("slow")
        }
        p if p.ends_with("/trailers") => {
            // Two chunks, then trailers (declared in `Trailer`, as HTTP/1.1
            // needs; sent only to a client that said `TE: trailers`).
            let mut trailers = hyper::HeaderMap::new();
            trailers.insert("x-checksum", "abc123".parse().unwrap());
            let frames = [
                Frame::data(Bytes::from("part1 ")),
                Frame::data(Bytes::from("part2")),
                Frame::trailers(trailers),
            ];
            StreamBody::new(frames_stream(frames)).boxed()
        }
        "/stream" => {
            let chunks = futures_stream(3, Duration::from_millis(100));
            StreamBody::new(chunks).boxed()
        }
        _ => {
            // Repeated headers are joined, as a list-valued header would be.
            let mut headers: BTreeMap<String, String> = BTreeMap::new();
            for (k, v) in &parts.headers {
                let v = v.to_str().unwrap_or("");
                headers
                    .entry(k.to_string())
                    .and_modify(|all| {
                        all.push_str(", ");
                        all.push_str(v);
                    })
                    .or_insert_with(|| v.to_string());
            }
            let echo = serde_json::json!({
                "upstream": &*name,
                "method": parts.method.as_str(),
                "path": parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"),
                "headers": headers,
                "body": String::from_utf8_lossy(&body),
                "trailers": request_trailers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect::<BTreeMap<_, _>>(),
            });
            full(serde_json::to_vec(&echo).unwrap())
        }
    };
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("x-upstream", name.parse().unwrap());
    if path.ends_with("/trailers") {
        response
            .headers_mut()
            .insert("trailer", "x-checksum".parse().unwrap());
    }
    // The echo, said to be JSON (filters that read JSON bodies ask).
    if path.starts_with("/json/") {
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
    }
    Ok(response)
}

/// An OpenAI-style chat completion answering `request` (whether streamed):
/// the reply is `echo: <the last message's content>`, the model the one
/// asked for, with usage; a stream is one event per word (the first with the
/// role), then the finish reason with usage, then `[DONE]`, 20 ms apart.
fn openai_chat(request: &[u8]) -> (Body, bool) {
    let request: serde_json::Value = serde_json::from_slice(request).unwrap_or_default();
    let model = request["model"].clone();
    let last = request["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .map(|message| message["content"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    let usage = serde_json::json!({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8});
    if request["stream"] != true {
        let completion = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo: {last}")}, "finish_reason": "stop"}],
            "usage": usage,
        });
        return (full(serde_json::to_vec(&completion).unwrap()), false);
    }
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let mut event = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if !finish.is_null() {
            event["usage"] = usage.clone();
        }
        format!("data: {event}\n\n")
    };
    let mut events = vec![chunk(
        serde_json::json!({"role": "assistant", "content": "echo:"}),
        serde_json::Value::Null,
    )];
    for word in last.split(' ') {
        events.push(chunk(
            serde_json::json!({"content": format!(" {word}")}),
            serde_json::Value::Null,
        ));
    }
    events.push(chunk(serde_json::json!({}), "stop".into()));
    events.push("data: [DONE]\n\n".to_string());
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for event in events {
            if tx.send(Ok(Frame::data(Bytes::from(event)))).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (StreamBody::new(Receiver(rx)).boxed(), true)
}

/// `count` chunks `chunk-<i>\n`, `gap` apart.
fn futures_stream(
    count: usize,
    gap: Duration,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for i in 0..count {
            if tx
                .send(Ok(Frame::data(Bytes::from(format!("chunk-{i}\n")))))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(gap).await;
        }
    });
    Receiver(rx)
}

/// The given frames, in order, as a stream (for streamed bodies with trailers).
pub fn frames_stream<const N: usize>(frames: [Frame<Bytes>; N]) -> Receiver {
    let (tx, rx) = tokio::sync::mpsc::channel(N);
    for frame in frames {
        tx.try_send(Ok(frame))
            .expect("the channel holds every frame");
    }
    Receiver(rx)
}

pub struct Receiver(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);

impl futures_core::Stream for Receiver {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
