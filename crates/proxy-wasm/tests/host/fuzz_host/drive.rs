//! Driving streams: a fuzzed exchange, run the way the gateway runs it,
//! and how it ended.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use wasmgate_proxy_wasm::{
    FilterError, FilterPlugin, Flow, Headers, HttpExchange, RequestInfo, UpstreamFacts,
};
use wasmgate_testkit::fuzz::Rng;

use super::reports::{harvest, Report};

pub(super) fn pairs(items: &[(&[u8], &[u8])]) -> Headers {
    Headers::from_pairs(
        items
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
    )
}

pub(super) fn fuzz_exchange(rng: &mut Rng) -> Box<HttpExchange> {
    let body_len = rng.pick(&[0usize, 0, 1, 100, 4096, 20_000]);
    let mut request_headers = pairs(&[
        (b":method", b"POST"),
        (b":path", b"/fuzz?x=1"),
        (b":authority", b"fuzz.local"),
        (b":scheme", b"http"),
        (b"x-probe", b"fz"),
        (b"content-length", body_len.to_string().as_bytes()),
    ]);
    for _ in 0..rng.below(4) {
        let (name_len, value_len) = (1 + rng.below(12), rng.below(40));
        let name = rng.bytes(name_len as usize);
        let value = rng.bytes(value_len as usize);
        request_headers.add(&name, value);
    }
    let trailers = |rng: &mut Rng| {
        if rng.chance(30) {
            pairs(&[(b"grpc-status", b"0"), (b"x-t", b"1")])
        } else {
            Headers::default()
        }
    };
    Box::new(HttpExchange {
        request_headers,
        request_body: rng.bytes(body_len),
        request_trailers: trailers(rng),
        response_headers: pairs(&[
            (b":status", b"200"),
            (b"server", b"upstream"),
            (b"content-length", b"12"),
        ]),
        response_body: {
            let len = rng.pick(&[0usize, 12, 3000]);
            rng.bytes(len)
        },
        response_trailers: trailers(rng),
        info: request_info(),
        response_details: Some("via_upstream".into()),
        properties: BTreeMap::new(),
        local_response: None,
    })
}

pub(super) fn request_info() -> RequestInfo {
    RequestInfo {
        id: 0x1234,
        protocol: "HTTP/1.1",
        start_time: Some(SystemTime::now()),
        source: Some(SocketAddr::from(([127, 0, 0, 1], 40000))),
        destination: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
        connection_id: 7,
        cluster: Some(Arc::new(UpstreamFacts {
            cluster_name: "fuzz-cluster".into(),
            nodes: vec!["127.0.0.1:9".into()],
        })),
        upstream_sent: true,
        tls: None,
        trace: Some(Box::new(wasmgate_proxy_wasm::TraceIds {
            trace_id: *b"0123456789abcdef",
            span_id: *b"01234567",
            sampled: true,
        })),
        ..RequestInfo::default()
    }
}

/// How one stream ended.
pub(super) enum End {
    Finished,
    /// A callback failed: (callback, message, whether it was a wasm trap).
    Crashed(String, String, bool),
    /// Paused with nothing that could resume it.
    Stalled,
    /// Kept paused past the host's limit.
    PausedTooLong,
    /// A callback ran past its deadline (the host interrupts wasm, never a
    /// host call; only a machine too busy to run 16 calls in 300 ms gets here).
    Deadline,
}

/// What a failed callback amounts to.
pub(super) fn ended(error: FilterError) -> End {
    match error {
        FilterError::Crash(report) if report.kind.as_str() == "timeout" => End::Deadline,
        FilterError::Crash(report) => End::Crashed(
            report.function.clone(),
            report.message.clone(),
            report.kind.as_str() == "trap",
        ),
        FilterError::Stalled { .. } => End::Stalled,
        FilterError::PausedTooLong { .. } => End::PausedTooLong,
        FilterError::Unavailable { reason, .. } => {
            panic!("the plugin became unavailable: {reason}")
        }
    }
}

/// Runs one stream the way the gateway does, collecting the guest's reports.
pub(super) async fn drive(
    plugin: &Arc<FilterPlugin>,
    exchange: &mut Box<HttpExchange>,
    reports: &mut Vec<Report>,
    split_body: bool,
) -> (End, Vec<Flow>) {
    let mut flows = Vec::new();
    let mut stream = plugin
        .stream()
        .await
        .unwrap_or_else(|e| panic!("a stream could not start: {e}"));
    macro_rules! step {
        ($call:expr) => {{
            let result = $call;
            harvest(exchange, reports);
            match result {
                Ok(flow) => {
                    flows.push(flow);
                    flow
                }
                Err(error) => return (ended(error), flows),
            }
        }};
    }
    let has_body = !exchange.request_body.is_empty();
    let has_trailers = !exchange.request_trailers.is_empty();
    let body = std::mem::take(&mut exchange.request_body);
    let mut settled = false;
    let flow = step!(
        stream
            .on_request_headers(exchange, !has_body && !has_trailers)
            .await
    );
    if matches!(flow, Flow::Respond | Flow::Close) {
        settled = true;
    }
    if !settled && has_body {
        let cut = if split_body {
            body.len() / 2
        } else {
            body.len()
        };
        exchange.request_body = body[..cut].to_vec();
        let mut last = cut == body.len();
        let mut flow = step!(
            stream
                .on_request_body(exchange, last && !has_trailers)
                .await
        );
        if !last && !matches!(flow, Flow::Respond | Flow::Close) {
            if flow == Flow::Buffer {
                exchange.request_body.extend_from_slice(&body[cut..]);
            } else {
                exchange.request_body = body[cut..].to_vec();
            }
            last = true;
            flow = step!(
                stream
                    .on_request_body(exchange, last && !has_trailers)
                    .await
            );
        }
        settled = matches!(flow, Flow::Respond | Flow::Close);
    }
    if !settled && has_trailers {
        let flow = step!(stream.on_request_trailers(exchange).await);
        settled = matches!(flow, Flow::Respond | Flow::Close);
    }
    if !settled {
        let has_body = !exchange.response_body.is_empty();
        let has_trailers = !exchange.response_trailers.is_empty();
        let flow = step!(
            stream
                .on_response_headers(exchange, !has_body && !has_trailers)
                .await
        );
        settled = matches!(flow, Flow::Respond | Flow::Close);
        if !settled && has_body {
            let flow = step!(stream.on_response_body(exchange, !has_trailers).await);
            settled = matches!(flow, Flow::Respond | Flow::Close);
        }
        if !settled && has_trailers {
            step!(stream.on_response_trailers(exchange).await);
        }
    }
    let result = stream.finish(exchange).await;
    harvest(exchange, reports);
    match result {
        Ok(()) => (End::Finished, flows),
        Err(error) => (ended(error), flows),
    }
}
