//! The codec against a real socket: a node written by hand that sends
//! exactly the bytes each case needs, split across writes where a split is
//! the point.

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use hyper::header::{self, HeaderValue};

/// How the node ends the connection after its pieces.
#[derive(Clone, Copy, PartialEq)]
enum After {
    KeepOpen,
    Close,
}

/// A node that reads one request head, sends `pieces` (a pause between
/// each, so the gateway reads them apart), then keeps the connection or
/// closes it. Gives what it was sent.
async fn node(pieces: Vec<&'static [u8]>, after: After) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        while !seen.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await.unwrap() == 0 {
                return seen;
            }
            seen.push(byte[0]);
        }
        for piece in pieces {
            stream.write_all(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if after == After::KeepOpen {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    });
    (port, serving)
}

async fn connect(port: u16) -> Http1Connection {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    Http1Connection::new(Stream::Plain(CountedConnection::uncounted(tcp)))
}

/// A deadline no test reaches.
fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

#[tokio::test]
async fn a_node_that_answers_too_late_is_a_timeout_and_an_answer_in_time_is_not() {
    // The node answers its first request at once and keeps the connection:
    // the deadline is armed by that exchange and set again for the next.
    let answer: &'static [u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (port, _node) = node(vec![answer], After::KeepOpen).await;
    let headers = HeaderMap::new();
    let soon = || tokio::time::Instant::now() + Duration::from_millis(100);
    let connection = connect(port).await;
    let Ok((parts, mut body)) = connection
        .exchange(&Method::GET, &Uri::from_static("/"), &headers, soon())
        .await
    else {
        panic!("the first answer came in time");
    };
    assert_eq!(parts.status, StatusCode::OK);
    while body.frame().await.is_some() {}
    let connection = body.take_finished().expect("kept for the next exchange");
    // The node answers no second request: 100 ms later, a timeout.
    let started = std::time::Instant::now();
    let uri = Uri::from_static("/");
    let second = connection.exchange(&Method::GET, &uri, &headers, soon());
    assert!(matches!(second.await, Err(ExchangeError::TimedOut)));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

/// One exchange's outcome, as the gateway would see it.
struct Outcome {
    parts: Parts,
    data: Vec<u8>,
    trailers: Option<HeaderMap>,
    error: Option<String>,
    reusable: bool,
    sent: Vec<u8>,
}

async fn exchange(method: Method, pieces: Vec<&'static [u8]>, after: After) -> Outcome {
    let (port, node) = node(pieces, after).await;
    let connection = connect(port).await;
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, HeaderValue::from_static("example.test"));
    let uri: Uri = "/path?q=1".parse().unwrap();
    let Ok((parts, mut body)) = connection.exchange(&method, &uri, &headers, far()).await else {
        panic!("no answer's head");
    };
    let (mut data, mut trailers, mut error) = (Vec::new(), None, None);
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(frame) => trailers = frame.into_trailers().ok(),
            },
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    assert!(
        body.is_end_stream(),
        "a body that gave its last frame has ended"
    );
    let reusable = body.take_finished().is_some();
    let sent = node.await.unwrap();
    Outcome {
        parts,
        data,
        trailers,
        error,
        reusable,
        sent,
    }
}

#[tokio::test]
async fn a_length_split_across_reads_is_read_whole_and_the_connection_kept() {
    let got = exchange(
        Method::GET,
        vec![
            b"HTTP/1.1 200 Fine\r\nContent-Length: 10\r\nX-Node: a\r\n\r\nhello",
            b"world",
        ],
        After::KeepOpen,
    )
    .await;
    assert_eq!(
        got.sent,
        b"GET /path?q=1 HTTP/1.1\r\nhost: example.test\r\n\r\n"
    );
    assert_eq!(got.parts.status, StatusCode::OK);
    let reason = got.parts.extensions.get::<ReasonPhrase>().expect("kept");
    assert_eq!(reason.as_bytes(), b"Fine");
    assert_eq!(got.parts.headers["x-node"], "a");
    assert_eq!(got.data, b"helloworld");
    assert_eq!(got.error, None);
    assert!(got.reusable);
}

#[tokio::test]
async fn a_chunked_body_with_extensions_and_trailers_is_decoded() {
    let got = exchange(
        Method::GET,
        vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
            b"lo\r\n6\r",
            b"\n world\r\n0\r\nx-sum: 42\r\n",
            b"\r\n",
        ],
        After::KeepOpen,
    )
    .await;
    assert_eq!(got.data, b"hello world");
    assert_eq!(got.error, None);
    assert_eq!(got.trailers.expect("trailers")["x-sum"], "42");
    assert!(got.reusable);
}

#[tokio::test]
async fn interim_answers_are_passed_over_and_bodiless_answers_have_no_body() {
    let got = exchange(
        Method::GET,
        vec![b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"],
        After::KeepOpen,
    )
    .await;
    assert_eq!(got.parts.status, StatusCode::NO_CONTENT);
    assert!(got.data.is_empty() && got.reusable);
    let head = exchange(
        Method::HEAD,
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n"],
        After::KeepOpen,
    )
    .await;
    assert_eq!(head.parts.headers["content-length"], "50");
    assert!(head.data.is_empty() && head.error.is_none() && head.reusable);
}

#[tokio::test]
async fn a_body_until_close_ends_cleanly_and_the_connection_is_not_kept() {
    let got = exchange(
        Method::GET,
        vec![b"HTTP/1.1 200 OK\r\n\r\nall of ", b"it"],
        After::Close,
    )
    .await;
    assert_eq!(got.data, b"all of it");
    assert_eq!(got.error, None);
    assert!(!got.reusable);
}

#[tokio::test]
async fn connections_the_node_will_close_are_not_kept() {
    for pieces in [
        // Said so.
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok".as_slice(),
        // HTTP/1.0 without keep-alive.
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        // More bytes than it framed: not to be trusted again.
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
    ] {
        let got = exchange(Method::GET, vec![pieces], After::KeepOpen).await;
        assert_eq!(got.data, b"ok");
        assert!(!got.reusable, "{}", String::from_utf8_lossy(pieces));
    }
}

#[tokio::test]
async fn a_body_cut_short_is_an_error() {
    let got = exchange(
        Method::GET,
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"],
        After::Close,
    )
    .await;
    assert_eq!(got.data, b"hello");
    assert!(got
        .error
        .expect("an error")
        .contains("before its answer's body ended"));
    assert!(!got.reusable);
    let chunked = exchange(
        Method::GET,
        vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX"],
        After::KeepOpen,
    )
    .await;
    assert!(chunked
        .error
        .expect("an error")
        .contains("longer than its size"));
}

#[tokio::test]
async fn a_bad_head_or_no_answer_is_an_exchange_error() {
    for (pieces, no_answer) in [
        (vec![], true),
        (
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok".as_slice()],
            false,
        ),
        (vec![b"SMTP ready\r\n\r\n".as_slice()], false),
        (vec![b"HTTP/1.1 200 OK\r\nContent-Le".as_slice()], false),
    ] {
        let (port, _node) = node(pieces, After::Close).await;
        let headers = HeaderMap::new();
        let sent = connect(port)
            .await
            .exchange(&Method::GET, &Uri::from_static("/"), &headers, far())
            .await;
        match sent {
            Err(ExchangeError::NoAnswer(_)) => assert!(no_answer),
            Err(ExchangeError::Failed(e)) => assert!(!no_answer, "{e}"),
            Err(ExchangeError::TimedOut) => panic!("timed out"),
            Ok(_) => panic!("a bad answer was taken"),
        }
    }
}

#[tokio::test]
async fn an_idle_connection_the_node_closes_is_noticed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (close, closing) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await.unwrap();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        let _ = closing.await;
    });
    let headers = HeaderMap::new();
    let Ok((_, mut body)) = connect(port)
        .await
        .exchange(&Method::GET, &Uri::from_static("/"), &headers, far())
        .await
    else {
        panic!("no answer");
    };
    body.frame().await.unwrap().unwrap();
    let mut connection = body.take_finished().expect("kept");
    let closed = poll_fn(|cx| Poll::Ready(connection.poll_idle_closed(cx))).await;
    assert!(!closed, "an open idle connection counted as closed");
    close.send(()).unwrap();
    node.await.unwrap();
    let noticed = poll_fn(|cx| match connection.poll_idle_closed(cx) {
        true => Poll::Ready(()),
        false => Poll::Pending,
    });
    tokio::time::timeout(Duration::from_secs(5), noticed)
        .await
        .expect("the close woke the idle connection's watcher");
}
