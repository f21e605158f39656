//! What one filter costs per request, without HTTP: a stream through every
//! phase the gateway runs for a GET whose response body comes in one chunk.
//! `cargo run --release -p wasmgate-proxy-wasm --example stream_bench [-- MODULE] [--quick]`
//! (MODULE from target/wasm, default `add_header`) prints µs per stream.

use std::path::PathBuf;

use bench_timing::Protocol;
use wasmgate_proxy_wasm::{
    FilterConfig, FilterPlugin, Headers, HttpExchange, Runtime, RuntimeConfig,
};

fn exchange() -> Box<HttpExchange> {
    let pairs = |items: &[(&str, &str)]| {
        Headers::from_pairs(
            items
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        )
    };
    Box::new(HttpExchange {
        request_headers: pairs(&[
            (":method", "GET"),
            (":path", "/rust"),
            (":authority", "127.0.0.1:18403"),
            (":scheme", "http"),
            ("user-agent", "wrk"),
        ]),
        response_headers: pairs(&[
            (":status", "200"),
            ("content-type", "text/plain"),
            ("content-length", "20"),
        ]),
        response_body: b"hello from upstream\n".to_vec(),
        ..HttpExchange::default()
    })
}

fn main() {
    let module = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| "add_header".into());
    let protocol = Protocol::from_args();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm")
        .join(format!("{module}.wasm"));
    let wasm = std::fs::read(&path).expect("run plugins/build.sh first");
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let config = FilterConfig {
        name: module.clone(),
        plugin_configuration: b"bench".to_vec(),
        ..FilterConfig::default()
    };
    let filter = tokio
        .block_on(FilterPlugin::new(&runtime, &wasm, config))
        .unwrap();
    let template = exchange();
    let (_, ns) = protocol.measure(|| {
        tokio.block_on(async {
            let mut exchange = template.clone();
            let mut stream = filter.stream().await.unwrap();
            stream
                .on_request_headers(&mut exchange, true)
                .await
                .unwrap();
            stream
                .on_response_headers(&mut exchange, false)
                .await
                .unwrap();
            stream.on_response_body(&mut exchange, true).await.unwrap();
            stream.finish(&mut exchange).await.unwrap();
        })
    });
    println!("{module}: {:.2} µs per stream", ns / 1000.0);
}
