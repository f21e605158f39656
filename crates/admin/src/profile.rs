//! `POST /profile?seconds=N&plugin=NAME&format=svg|folded`: records a CPU
//! profile of guest code under live traffic for N seconds (default 10, at
//! most 300), of one plugin or all, and answers a flame graph (SVG, the
//! default) or the folded stacks it is drawn from. Sampling is the
//! runtime's epoch profiler (`wasmgate_runtime::profiler`).

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;
use wasmgate_runtime::profiler;

use super::Reply;
use wasmgate_gateway::LiveGateway;

const DEFAULT_SECONDS: u64 = 10;
const MAX_SECONDS: u64 = 300;

pub(super) async fn record(live: &LiveGateway, query: &str) -> Reply {
    let mut millis = DEFAULT_SECONDS * 1000;
    let mut plugin = None;
    let mut svg = true;
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        match key {
            "seconds" => match value.parse::<f64>() {
                Ok(s) if s > 0.0 && s <= MAX_SECONDS as f64 => millis = (s * 1000.0) as u64,
                _ => {
                    return Reply::error(
                        StatusCode::BAD_REQUEST,
                        format!("seconds must be in (0, {MAX_SECONDS}]"),
                    )
                }
            },
            "plugin" => plugin = Some(value.to_string()),
            "format" => match value {
                "svg" => svg = true,
                "folded" => svg = false,
                other => {
                    return Reply::error(
                        StatusCode::BAD_REQUEST,
                        format!("format `{other}`: use svg or folded"),
                    )
                }
            },
            other => {
                return Reply::error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter `{other}`"),
                )
            }
        }
    }
    if let Some(name) = &plugin {
        let gateway = live.current();
        if !gateway.plugin_kinds.iter().any(|(n, _)| n == name) {
            return Reply::error(StatusCode::NOT_FOUND, format!("no plugin `{name}`"));
        }
    }
    if let Err(busy) = profiler::start(plugin.clone()) {
        return Reply::error(StatusCode::CONFLICT, busy);
    }
    let recording = Recording { finished: false };
    tokio::time::sleep(Duration::from_millis(millis)).await;
    let profile = recording.finish();
    tracing::info!(
        plugin = plugin.as_deref().unwrap_or("*"),
        samples = profile.samples(),
        sampling_ms = profile.sampling.as_millis() as u64,
        "CPU profile recorded"
    );
    if !svg {
        return Reply::text(StatusCode::OK, "text/plain", profile.folded());
    }
    if profile.stacks.is_empty() {
        return Reply::json(
            StatusCode::OK,
            json!({"samples": 0, "message": "no guest code ran while recording (no traffic to the plugin?)"}),
        );
    }
    match flame_graph(&profile, plugin.as_deref(), millis) {
        Ok(svg) => Reply::text(StatusCode::OK, "image/svg+xml", svg),
        Err(e) => Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("drawing the flame graph: {e}"),
        ),
    }
}

/// Stops the profiler even if the client goes away mid-recording (the
/// request's future is dropped then).
struct Recording {
    finished: bool,
}

impl Recording {
    fn finish(mut self) -> profiler::Profile {
        self.finished = true;
        profiler::stop()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.finished {
            profiler::stop();
        }
    }
}

fn flame_graph(
    profile: &profiler::Profile,
    plugin: Option<&str>,
    ms: u64,
) -> anyhow::Result<Vec<u8>> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!(
        "wasm CPU: {} over {:.1} s ({} samples at the epoch tick)",
        plugin.unwrap_or("all plugins"),
        ms as f64 / 1000.0,
        profile.samples()
    );
    options.count_name = "samples".into();
    let folded = profile.folded();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)?;
    Ok(svg)
}
