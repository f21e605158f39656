//! The floor of a lean-codec design (issue 57): HTTP/1.1 read and written by
//! the proxy itself on tokio, heads parsed by `httparse` and written by hand
//! straight from the parsed head, in the request's own task (no connection
//! task, no channel, no header map). One upstream connection per downstream
//! connection; bodies with a Content-Length only (no chunked coding, no
//! upgrades, no limits): what a proxy's common request costs at least here.
//! `lean-proxy PORT UPSTREAM_PORT`
use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u16>().unwrap());
    let (port, upstream) = (args.next().unwrap(), args.next().unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let _ = proxy_connection(stream, upstream).await;
            });
        }
    });
}

/// A parsed head's facts the proxy needs, and the head rewritten for the other side.
struct Head {
    length: usize,
    body: usize,
}

async fn proxy_connection(mut client: TcpStream, upstream: u16) -> io::Result<()> {
    let mut node = TcpStream::connect(("127.0.0.1", upstream)).await?;
    node.set_nodelay(true)?;
    let (mut from_client, mut from_node) = (Vec::with_capacity(8192), Vec::with_capacity(8192));
    let mut out = Vec::with_capacity(8192);
    loop {
        let head = loop {
            if let Some(head) = request_head(&from_client, &mut out)? {
                break head;
            }
            if read_more(&mut client, &mut from_client).await? == 0 {
                return Ok(());
            }
        };
        forward_body(&mut client, &mut from_client, &mut out, head).await?;
        node.write_all(&out).await?;
        let head = loop {
            if let Some(head) = response_head(&from_node, &mut out)? {
                break head;
            }
            if read_more(&mut node, &mut from_node).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        forward_body(&mut node, &mut from_node, &mut out, head).await?;
        client.write_all(&out).await?;
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<usize> {
    if buffer.capacity() == buffer.len() {
        buffer.reserve(8192);
    }
    stream.read_buf(buffer).await
}

/// Appends the head's body (read as far as needed) to `out` and drops both from `buffer`.
async fn forward_body(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    out: &mut Vec<u8>,
    head: Head,
) -> io::Result<()> {
    while buffer.len() < head.length + head.body {
        if read_more(stream, buffer).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    out.extend_from_slice(&buffer[head.length..head.length + head.body]);
    buffer.drain(..head.length + head.body);
    Ok(())
}

fn request_head(buffer: &[u8], out: &mut Vec<u8>) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let length = match request.parse(buffer).map_err(io::Error::other)? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(None),
    };
    out.clear();
    for part in [
        request.method.unwrap_or("GET"),
        " ",
        request.path.unwrap_or("/"),
        " HTTP/1.1\r\n",
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    let body = write_headers(request.headers, out)?;
    Ok(Some(Head { length, body }))
}

fn response_head(buffer: &[u8], out: &mut Vec<u8>) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer).map_err(io::Error::other)? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(None),
    };
    out.clear();
    let mut status = itoa::Buffer::new();
    for part in [
        "HTTP/1.1 ",
        status.format(response.code.unwrap_or(502)),
        " ",
        response.reason.unwrap_or(""),
        "\r\n",
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    let body = write_headers(response.headers, out)?;
    Ok(Some(Head { length, body }))
}

/// Writes the end-to-end headers and the blank line; returns the body's length.
fn write_headers(headers: &[httparse::Header], out: &mut Vec<u8>) -> io::Result<usize> {
    let mut body = 0;
    for header in headers {
        if HOP_BY_HOP
            .iter()
            .any(|h| header.name.eq_ignore_ascii_case(h))
        {
            if header.name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(io::Error::other("chunked bodies are outside this probe"));
            }
            continue;
        }
        if header.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| io::Error::other("bad content-length"))?;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(body)
}
