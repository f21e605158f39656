//! A `wasi:http/proxy` component exporting `wasi:http/incoming-handler`. Its
//! paths are shared with plugins/component/python/app.py and
//! plugins/component/js/app.js, so one set of tests drives all three.

use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingRequest, IncomingResponse, Method, OutgoingBody,
    OutgoingRequest, OutgoingResponse, ResponseOutparam, Scheme,
};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

wasip2::http::proxy::export!(Handler);

struct Handler;

/// Counts `GET /state` calls; a fresh instance per request keeps it at 1.
static STATE: AtomicU32 = AtomicU32::new(0);

impl Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let method = request.method();
        let path_with_query = request.path_with_query().unwrap_or_default();
        let (path, query) = match path_with_query.split_once('?') {
            Some((p, q)) => (p, q),
            None => (path_with_query.as_str(), ""),
        };
        let get = matches!(method, Method::Get);
        match path {
            "/" if get => respond(out, 200, b"hello from rust component"),
            "/echo" if matches!(method, Method::Post) => echo(request, out),
            "/fetch" if get => fetch(query_param(query, "url"), out),
            "/trap" if get => panic!("trap requested"),
            // The head and part of the body, then a trap: the client must
            // not take the body for whole (Rust's component only).
            "/trap-midway" if get => {
                let (_body, mut stream) = start(out, 200);
                stream.write_all(b"the first part").expect("write response body");
                stream.flush().expect("flush response body");
                panic!("trap after the response began");
            }
            "/loop" if get => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            "/grow" if get => {
                let mut keep: Vec<Vec<u8>> = Vec::new();
                loop {
                    keep.push(black_box(vec![1u8; 1 << 20]));
                    black_box(&keep);
                }
            }
            "/state" if get => {
                let n = STATE.fetch_add(1, Ordering::SeqCst) + 1;
                respond(out, 200, n.to_string().as_bytes())
            }
            "/header" if get => {
                let value = query_param(query, "name")
                    .and_then(|name| request.headers().get(&name).into_iter().next());
                match value {
                    Some(value) => respond(out, 200, &value),
                    None => respond(out, 404, b"not set"),
                }
            }
            "/env" if get => match query_param(query, "name").and_then(|n| std::env::var(n).ok()) {
                Some(value) => respond(out, 200, value.as_bytes()),
                None => respond(out, 404, b"not set"),
            },
            "/file" if get => match query_param(query, "path").map(std::fs::read) {
                Some(Ok(bytes)) => respond(out, 200, &bytes),
                Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    respond(out, 404, e.to_string().as_bytes())
                }
                Some(Err(e)) => respond(out, 500, e.to_string().as_bytes()),
                None => respond(out, 400, b"missing path"),
            },
            _ => respond(out, 404, b"not found"),
        }
    }
}

/// Sends the response head; returns the body and its stream.
fn start(out: ResponseOutparam, status: u16) -> (OutgoingBody, OutputStream) {
    let headers = Fields::new();
    headers
        .append("content-type", b"text/plain")
        .expect("content-type header");
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).expect("status code");
    let body = response.body().expect("response body");
    ResponseOutparam::set(out, Ok(response));
    let stream = body.write().expect("response body stream");
    (body, stream)
}

fn finish(body: OutgoingBody, stream: OutputStream) {
    drop(stream);
    OutgoingBody::finish(body, None).expect("finish response body");
}

fn respond(out: ResponseOutparam, status: u16, bytes: &[u8]) {
    let (body, mut stream) = start(out, status);
    stream.write_all(bytes).expect("write response body");
    stream.flush().expect("flush response body");
    finish(body, stream);
}

/// Copies `from` into `to` chunk by chunk, never holding the whole body.
fn copy(from: &InputStream, to: &mut OutputStream) {
    loop {
        match from.blocking_read(64 * 1024) {
            Ok(chunk) => to.write_all(&chunk).expect("write body chunk"),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                panic!("read body: {}", e.to_debug_string())
            }
        }
    }
    to.flush().expect("flush body");
}

fn echo(request: IncomingRequest, out: ResponseOutparam) {
    let incoming = request.consume().expect("request body");
    let input = incoming.stream().expect("request body stream");
    let (body, mut stream) = start(out, 200);
    copy(&input, &mut stream);
    drop(input);
    IncomingBody::finish(incoming);
    finish(body, stream);
}

fn fetch(url: Option<String>, out: ResponseOutparam) {
    let Some((scheme, authority, path_with_query)) = url.as_deref().and_then(split_url) else {
        return respond(out, 400, b"bad url");
    };
    let request = OutgoingRequest::new(Fields::new());
    request.set_method(&Method::Get).unwrap();
    request.set_scheme(Some(&scheme)).unwrap();
    request.set_authority(Some(authority)).unwrap();
    request.set_path_with_query(Some(path_with_query)).unwrap();
    match send(request) {
        Ok(response) => {
            let status = response.status();
            let incoming = response.consume().expect("upstream body");
            let input = incoming.stream().expect("upstream body stream");
            let (body, mut stream) = start(out, 200);
            stream
                .write_all(format!("upstream {status}\n").as_bytes())
                .expect("write response body");
            copy(&input, &mut stream);
            drop(input);
            IncomingBody::finish(incoming);
            finish(body, stream);
        }
        Err(code) => respond(out, 502, format!("outgoing error: {code:?}").as_bytes()),
    }
}

fn send(request: OutgoingRequest) -> Result<IncomingResponse, ErrorCode> {
    let future = outgoing_handler::handle(request, None)?;
    future.subscribe().block();
    future
        .get()
        .expect("response ready after block")
        .expect("response taken once")
}

/// `http://host:port/path?q` → (scheme, authority, path with query).
fn split_url(url: &str) -> Option<(Scheme, &str, &str)> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return None;
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return None;
    }
    Some((scheme, authority, if path.is_empty() { "/" } else { path }))
}

/// The percent-decoded value of `name` in a query string.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
