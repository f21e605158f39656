//! The HTTP server both runtimes' requests go to: `pong`, or 404 under
//! `/status/404`.

use std::io::{Read, Write};

pub(crate) fn serve_http() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let length: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let chunked = text.contains("transfer-encoding: chunked");
                let body_start = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let mut body = head[body_start..].to_vec();
                // The whole body (ureq sends a POST's chunked), so that
                // closing does not reset the connection under the client.
                while if chunked {
                    !body.ends_with(b"0\r\n\r\n")
                } else {
                    body.len() < length
                } {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => body.extend_from_slice(&buf[..n]),
                    }
                }
                let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                let (status, answer) = if path.starts_with("/status/404") {
                    ("404 Not Found", "nope")
                } else {
                    ("200 OK", "pong")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nx-test: yes\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.shutdown(std::net::Shutdown::Write);
                let _ = stream.read(&mut buf);
            });
        }
    });
    port
}
