//! The HTTP benchmark's ceiling: wasmgate's listener answering with the same
//! JSON as the hello plugin, from native Rust and no wasm.
//!
//! `native_hello [PORT] [THREADS]`

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::{Request, Response};
use wasmgate_gateway::body::{self, Body};
use wasmgate_gateway::{Connection, Handler, ListenerConfig};
use wasmgate_transport::body::RequestBody;

struct NativeHello;

impl Handler for NativeHello {
    async fn handle(
        &self,
        request: Request<RequestBody>,
        _connection: Connection,
    ) -> Response<Body> {
        let body = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let name = String::from_utf8_lossy(&body);
        let json = serde_json::json!({ "message": format!("Hello {name}") }).to_string();
        Response::builder()
            .header("content-type", "application/json")
            .body(body::full(json))
            .unwrap()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map_or(8093, |p| p.parse().unwrap());
    let threads: usize = args.next().map_or(1, |t| t.parse().unwrap());
    // The same serving model as `wasmgate serve`: worker threads with a
    // single-threaded runtime each, so the comparison is handler against handler.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (_keep_serving, shutdown) = tokio::sync::watch::channel(false);
    let workers = wasmgate_gateway::serve_workers(
        vec![wasmgate_gateway::Listening {
            socket: listener,
            tls: None,
            max_connections: 10_000,
        }],
        threads,
        Arc::new(NativeHello),
        ListenerConfig::default(),
        shutdown,
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(workers.wait()).unwrap();
}
