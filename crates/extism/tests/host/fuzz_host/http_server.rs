//! The embedder side: an HTTP server for `http_request` that answers well,
//! badly, slowly or not at all.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers by path: `/ok`, `/big` (200 kB), `/garbage` (not HTTP), `/close`
/// (hangs up), `/slow` (10 ms), `/status/503`.
pub(super) async fn serve_http(listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            let read = tokio::time::timeout(Duration::from_secs(2), async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            })
            .await;
            if read != Ok(true) {
                return;
            }
            let line = String::from_utf8_lossy(&head);
            let path = line.split(' ').nth(1).unwrap_or("/");
            let response: Vec<u8> = if path.starts_with("/big") {
                let body = vec![b'b'; 200_000];
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                r.extend_from_slice(&body);
                r
            } else if path.starts_with("/garbage") {
                b"NOT HTTP AT ALL\r\n\r\n".to_vec()
            } else if path.starts_with("/close") {
                return;
            } else if path.starts_with("/status/503") {
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy"
                    .to_vec()
            } else {
                if path.starts_with("/slow") {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nx-test: yes\r\nx-bin: \xff\r\nconnection: close\r\n\r\npong"
                    .to_vec()
            };
            let _ = socket.write_all(&response).await;
            let _ = socket.shutdown().await;
        });
    }
}
