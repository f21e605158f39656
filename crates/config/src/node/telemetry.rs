//! What the node tells about its requests besides metrics: the access log
//! (`access_log`) and traces exported over OTLP (`tracing`), with their
//! checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where and how the node writes its access log; read at start-up.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Whether requests are logged at all (routes can opt out one by one).
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// A file, appended to and opened again on SIGUSR1 (logrotate's
    /// convention), relative to this file's directory; `-` is standard
    /// output.
    #[serde(default = "stdout")]
    pub path: String,
    #[serde(default)]
    pub format: AccessLogFormat,
}

/// JSON lines, or text with named fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    #[default]
    Json,
    Text,
}

fn enabled() -> bool {
    true
}

fn stdout() -> String {
    "-".into()
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: true,
            path: stdout(),
            format: AccessLogFormat::Json,
        }
    }
}

impl AccessLogConfig {
    pub fn is_default(&self) -> bool {
        *self == AccessLogConfig::default()
    }
}

/// Traces of requests, exported over OTLP; read at start-up.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// A collector's OTLP endpoint (Jaeger, Tempo, the OpenTelemetry
    /// Collector, ...): `http://host:4317`, or `https://` for TLS.
    pub endpoint: String,
    /// OTLP over `grpc` (port 4317, the default) or `http` (protobuf
    /// POSTed to `<endpoint>/v1/traces`, port 4318).
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// For an `https://` endpoint: a PEM file of the CAs to trust (a
    /// private CA, a self-signed collector; relative to the configuration
    /// file); without it, Mozilla's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The share of new traces recorded, 0 to 1. A request that carries a
    /// `traceparent` follows its sampled flag instead, unless
    /// `respect_sampled` is off.
    #[serde(default = "full_ratio")]
    pub sample_ratio: f64,
    /// Whether a client's `traceparent` sampled flag decides that its
    /// request is recorded (W3C's rule, the default). Off (`false`), every
    /// request is recorded at `sample_ratio`, whatever its client says, so
    /// clients cannot decide what reaches the collector.
    #[serde(default = "enabled")]
    pub respect_sampled: bool,
    /// The spans' `service.name`.
    #[serde(default = "service_name")]
    pub service_name: String,
    /// How long finished spans wait to go in one batch.
    #[serde(default = "batch_delay_ms")]
    pub batch_delay_ms: u64,
    /// Finished spans kept while the collector is slow or down; beyond
    /// them, spans are dropped (requests never wait).
    #[serde(default = "queue_spans")]
    pub queue_spans: usize,
}

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    #[default]
    Grpc,
    Http,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: String::new(),
            protocol: OtlpProtocol::Grpc,
            ca_file: None,
            sample_ratio: full_ratio(),
            respect_sampled: true,
            service_name: service_name(),
            batch_delay_ms: batch_delay_ms(),
            queue_spans: queue_spans(),
        }
    }
}

fn full_ratio() -> f64 {
    1.0
}

fn batch_delay_ms() -> u64 {
    1000
}

fn queue_spans() -> usize {
    8192
}

fn service_name() -> String {
    "wasmgate".into()
}

/// What a collector endpoint and a sampling ratio must be.
pub fn check_tracing(tracing: &TracingConfig, problem: &mut dyn FnMut(String, String)) {
    let endpoint = &tracing.endpoint;
    let authority = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"));
    if authority.is_none_or(|a| a.trim_end_matches('/').is_empty()) {
        problem(
            "tracing.endpoint".into(),
            format!(
                "`{endpoint}` is not an OTLP endpoint wasmgate can reach: write http://host:port (as `http://127.0.0.1:4317`), or https:// for TLS"
            ),
        );
    }
    if tracing.ca_file.is_some() && !endpoint.starts_with("https://") {
        problem(
            "tracing.ca_file".into(),
            format!("`{endpoint}` is not TLS: a CA file only applies to an https:// endpoint"),
        );
    }
    if !(0.0..=1.0).contains(&tracing.sample_ratio) {
        problem(
            "tracing.sample_ratio".into(),
            format!(
                "{} is not a share: write 0 to 1 (0.01 records one new trace in a hundred)",
                tracing.sample_ratio
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracing_endpoint_is_http_or_https_and_a_ratio_a_share() {
        let mut problems = Vec::new();
        let bad = TracingConfig {
            endpoint: "collector:4317".into(),
            sample_ratio: 1.5,
            ..TracingConfig::default()
        };
        check_tracing(&bad, &mut |at, why| problems.push((at, why)));
        let fields: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(fields, ["tracing.endpoint", "tracing.sample_ratio"]);
        problems.clear();
        // A CA file is for TLS only.
        let plain_with_ca = TracingConfig {
            endpoint: "http://127.0.0.1:4318".into(),
            ca_file: Some("ca.pem".into()),
            ..TracingConfig::default()
        };
        check_tracing(&plain_with_ca, &mut |at, why| problems.push((at, why)));
        let fields: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(fields, ["tracing.ca_file"]);
        problems.clear();
        for good in [
            TracingConfig {
                endpoint: "http://127.0.0.1:4317".into(),
                ..TracingConfig::default()
            },
            TracingConfig {
                endpoint: "https://collector:4318".into(),
                protocol: OtlpProtocol::Http,
                ca_file: Some("ca.pem".into()),
                ..TracingConfig::default()
            },
        ] {
            check_tracing(&good, &mut |at, why| problems.push((at, why)));
        }
        assert!(problems.is_empty(), "{problems:?}");
    }
}
