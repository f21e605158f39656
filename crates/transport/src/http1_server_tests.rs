//! The listener's HTTP/1.1 codec against a real socket: a client written by
//! hand sends exactly the bytes each case needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::body::{self, Body, BoxError};

/// Answers `/echo` with the request's body (read whole), `/stream` with a
/// body of unknown length, `/ignore` without reading the body, `/hang`
/// never (noting when its future is dropped), anything else with the
/// method and target.
struct Echo {
    hang_dropped: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Handler for Echo {
    async fn handle(&self, request: Request<RequestBody>, _: Connection) -> Response<Body> {
        let path = request.uri().path().to_string();
        match path.as_str() {
            "/echo" => match request.into_body().collect().await {
                Ok(collected) => Response::new(body::full(collected.to_bytes())),
                Err(e) => {
                    let mut answer = Response::new(body::full(e.to_string()));
                    *answer.status_mut() = StatusCode::BAD_REQUEST;
                    answer
                }
            },
            "/stream" => {
                let frames = ["one,", "two"].map(|part| {
                    Ok::<_, BoxError>(Frame::data(Bytes::from_static(part.as_bytes())))
                });
                Response::new(body::boxed(StreamBody::new(futures_util::stream::iter(
                    frames,
                ))))
            }
            "/ignore" => Response::new(body::full("ignored")),
            "/trailers" => {
                let mut trailers = hyper::HeaderMap::new();
                trailers.insert("x-sum", "42".parse().unwrap());
                trailers.insert("x-undeclared", "1".parse().unwrap());
                let frames = [
                    Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"data"))),
                    Ok(Frame::trailers(trailers)),
                ];
                let mut answer = Response::new(body::boxed(StreamBody::new(
                    futures_util::stream::iter(frames),
                )));
                answer
                    .headers_mut()
                    .insert("trailer", "x-sum".parse().unwrap());
                answer
            }
            "/hang" => {
                let _flag = DropFlag(self.hang_dropped.clone());
                std::future::pending::<()>().await;
                unreachable!()
            }
            _ => Response::new(body::full(format!(
                "{} {}",
                request.method(),
                request.uri()
            ))),
        }
    }
}

/// A codec serving one connection; what it served it as, and its port.
async fn server(timeout: Duration) -> (u16, Arc<AtomicBool>, tokio::task::JoinHandle<Served>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hang_dropped = Arc::new(AtomicBool::new(false));
    let handler = Echo {
        hang_dropped: hang_dropped.clone(),
    };
    let serving = tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let connection = Connection {
            id: 1,
            peer,
            local: peer,
            tls: None,
        };
        let (_stop, mut stopping) = watch::channel(false);
        serve(stream, &handler, &connection, timeout, &mut stopping).await
    });
    (port, hang_dropped, serving)
}

/// Sends `request` and reads until the server closes (or 5 s pass).
async fn exchange(port: u16, request: &[u8]) -> String {
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer));
    let _ = read.await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (port, _, served) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nPOST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let answers: Vec<&str> = answer.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(answers.len(), 3, "{answer}");
    assert!(answers[0].starts_with("200 OK\r\n"), "{answer}");
    assert!(answers[0].contains("content-length: 6\r\n"), "{answer}");
    assert!(answers[0].contains("\r\ndate: "), "{answer}");
    assert!(answers[0].ends_with("\r\n\r\nGET /a"), "{answer}");
    assert!(answers[1].ends_with("\r\n\r\nhello"), "{answer}");
    assert!(answers[2].contains("connection: close\r\n"), "{answer}");
    assert!(answers[2].ends_with("GET /b"), "{answer}");
    assert!(matches!(served.await.unwrap(), Served::Closed));
}

/// The two answers of a pipelined pair, each after its status line.
fn two_answers(answer: &str) -> (&str, &str) {
    let (_, rest) = answer
        .split_once("HTTP/1.1 200 OK\r\n")
        .expect("a first answer");
    rest.split_once("HTTP/1.1 200 OK\r\n")
        .expect("a second answer")
}

#[tokio::test]
async fn chunked_bodies_both_ways() {
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-sum: 1\r\n\r\nGET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (echo, stream) = two_answers(&answer);
    assert!(echo.ends_with("\r\n\r\nabcde"), "{answer}");
    assert!(
        stream.contains("transfer-encoding: chunked\r\n"),
        "{answer}"
    );
    assert!(
        stream.ends_with("\r\n\r\n4\r\none,\r\n3\r\ntwo\r\n0\r\n\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn trailers_go_to_a_client_that_takes_them_and_only_those_declared() {
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"GET /trailers HTTP/1.1\r\nte: trailers\r\n\r\nGET /trailers HTTP/1.1\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (taken, not_taken) = two_answers(&answer);
    assert!(
        taken.ends_with("4\r\ndata\r\n0\r\nx-sum: 42\r\n\r\n"),
        "{answer}"
    );
    assert!(not_taken.ends_with("4\r\ndata\r\n0\r\n\r\n"), "{answer}");
}

#[tokio::test]
async fn http_1_0_closes_unless_kept_alive() {
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(port, b"GET /stream HTTP/1.0\r\n\r\n").await;
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\none,two"), "{answer}");

    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"GET /a HTTP/1.0\r\nconnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n",
    )
    .await;
    assert!(answer.contains("connection: keep-alive\r\n"), "{answer}");
    assert!(answer.ends_with("GET /b"), "{answer}");
}

#[tokio::test]
async fn a_head_answer_keeps_its_length_and_sends_no_body() {
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"HEAD /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("content-length: 7\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "{answer}");
}

#[tokio::test]
async fn ambiguous_framing_and_oversized_heads_are_refused() {
    for (request, status) in [
        (&b"POST /echo HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"[..], "400"),
        (b"POST /echo HTTP/1.1\r\ncontent-length: 3, 4\r\n\r\nabcd", "400"),
        (b"POST /echo HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n", "400"),
        (b"POST /echo HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", "400"),
        (b"GET /a HTTP/1.1\r\nbad header\r\n\r\n", "400"),
        (b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "400"),
    ] {
        let (port, _, _) = server(Duration::from_secs(5)).await;
        let answer = exchange(port, request).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{answer}");
    }
    let many: String = (0..101).map(|i| format!("x-{i}: v\r\n")).collect();
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(port, format!("GET /a HTTP/1.1\r\n{many}\r\n").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let huge = "a".repeat(MAX_HEAD + 10);
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(port, format!("GET /a HTTP/1.1\r\nx: {huge}").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test]
async fn a_half_sent_head_gets_408_and_silence_is_closed() {
    let (port, _, _) = server(Duration::from_millis(300)).await;
    let answer = exchange(port, b"GET /a HTTP/1.1\r\nhost").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let (port, _, _) = server(Duration::from_millis(300)).await;
    let answer = exchange(port, b"").await;
    assert_eq!(answer, "");
    // After a first answer, the same rules.
    let (port, _, _) = server(Duration::from_millis(300)).await;
    let answer = exchange(port, b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1").await;
    assert!(
        answer.contains("GET /a")
            && answer
                .ends_with("408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn an_unread_body_is_passed_over_for_the_next_request() {
    let (port, _, _) = server(Duration::from_secs(5)).await;
    let answer = exchange(
        port,
        b"POST /ignore HTTP/1.1\r\ncontent-length: 10\r\n\r\n0123456789GET /after HTTP/1.1\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.contains("ignored") && answer.ends_with("GET /after"),
        "{answer}"
    );
}

#[tokio::test]
async fn upgrades_and_http2_are_handed_to_hyper_with_what_was_read() {
    for request in [
        &b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"[..],
        b"POST /e HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
        b"CONNECT x:443 HTTP/1.1\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let (port, _, served) = server(Duration::from_secs(5)).await;
        let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        // A preface comes first on a connection; the rest after an answer.
        if !request.starts_with(b"PRI") {
            client
                .write_all(b"GET /first HTTP/1.1\r\n\r\n")
                .await
                .unwrap();
            let mut first = vec![0; 4096];
            let n = client.read(&mut first).await.unwrap();
            assert!(String::from_utf8_lossy(&first[..n]).ends_with("GET /first"));
        }
        client.write_all(request).await.unwrap();
        let handed = served.await.unwrap();
        let Served::HandOff(mut prefixed) = handed else {
            panic!("{} was not handed off", String::from_utf8_lossy(request));
        };
        let mut read = vec![0; request.len()];
        prefixed.read_exact(&mut read).await.unwrap();
        assert_eq!(read, request);
    }
}

#[tokio::test]
async fn a_client_that_leaves_cancels_its_request() {
    let (port, hang_dropped, served) = server(Duration::from_secs(5)).await;
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"GET /hang HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!hang_dropped.load(Ordering::SeqCst));
    drop(client);
    let served = tokio::time::timeout(Duration::from_secs(5), served).await;
    assert!(matches!(served.unwrap().unwrap(), Served::Closed));
    assert!(hang_dropped.load(Ordering::SeqCst));
}

/// Hostile bytes: valid requests cut, flipped and spliced at random (a
/// fixed seed, so a failure replays). Every connection ends, by an answer
/// or a close, without a panic and without the codec waiting past the
/// header read timeout.
#[tokio::test]
async fn mangled_requests_end_in_an_answer_or_a_close() {
    const SAMPLES: [&[u8]; 4] = [
        b"GET /a?x=1 HTTP/1.1\r\nhost: x\r\naccept: */*\r\n\r\n",
        b"POST /echo HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nt: 1\r\n\r\n",
        b"GET /stream HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below.max(1) as u64) as usize
    };
    for _ in 0..300 {
        let mut bytes = SAMPLES[random(SAMPLES.len())].to_vec();
        for _ in 0..=random(4) {
            let at = random(bytes.len());
            match random(4) {
                0 if !bytes.is_empty() => bytes[at] = random(256) as u8,
                0 | 1 => bytes.truncate(at),
                2 => bytes.insert(at, b"\r\n:; \t\0\x7f"[random(8)]),
                _ => {
                    let other = SAMPLES[random(SAMPLES.len())];
                    bytes.extend_from_slice(&other[random(other.len())..]);
                }
            }
        }
        let (port, _, served) = server(Duration::from_millis(200)).await;
        // The client says all it will say (its side closed), then reads.
        let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let _ = client.write_all(&bytes).await;
        let _ = client.shutdown().await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer)).await;
        let ended = tokio::time::timeout(Duration::from_secs(5), served).await;
        let ended =
            ended.unwrap_or_else(|_| panic!("still serving {:?}", String::from_utf8_lossy(&bytes)));
        ended.unwrap_or_else(|e| panic!("{e} on {:?}", String::from_utf8_lossy(&bytes)));
    }
}
