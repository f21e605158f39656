//! Starting the access log for `run` and `serve` (the log itself is
//! `wasmgate_observe::access_log`), and reopening it on SIGUSR1; starting
//! and flushing traces (`wasmgate_observe::trace`).

use std::path::Path;

use anyhow::{Context, Result};
use wasmgate_observe::access_log::{self, AccessLog, Format, Target};

/// Starts the process's access log to `path` (`-`: standard output;
/// relative paths from `base`), unless `enabled` is false, and reopens it
/// on every SIGUSR1. Call from within the tokio runtime.
pub fn start(enabled: bool, path: &str, format: Format, base: &Path) -> Result<()> {
    if !enabled {
        return Ok(());
    }
    let target = match path {
        "-" => Target::Stdout,
        file => Target::File(wasmgate_base::paths::resolve(base, file)),
    };
    let log = AccessLog::start(target.clone(), format)
        .with_context(|| format!("access_log: cannot open {target:?}"))?;
    access_log::install(log);
    tokio::spawn(reopen_on_sigusr1());
    Ok(())
}

async fn reopen_on_sigusr1() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        tracing::warn!("cannot listen for SIGUSR1: the access log will not be reopened");
        return;
    };
    while usr1.recv().await.is_some() {
        if let Some(log) = access_log::global() {
            log.reopen();
        }
    }
}

/// The format a configuration names.
pub fn format_of(format: wasmgate_config::AccessLogFormat) -> Format {
    match format {
        wasmgate_config::AccessLogFormat::Json => Format::Json,
        wasmgate_config::AccessLogFormat::Text => Format::Text,
    }
}

/// Before the process exits: the lines of the last requests are written
/// (a second at most), and their spans sent.
pub fn drain() {
    if let Some(log) = access_log::global() {
        if !log.drain(std::time::Duration::from_secs(1)) {
            tracing::warn!("the access log's last lines were not all written before exit");
        }
    }
    if let Some(tracing) = wasmgate_observe::trace::global() {
        tracing.flush();
    }
}

/// Starts tracing to the OTLP collector `config` names (its CA file
/// relative to `base`). Call from within the tokio runtime.
pub fn start_tracing(config: &wasmgate_config::TracingConfig, base: &Path) -> Result<()> {
    let mut problems = Vec::new();
    wasmgate_config::check_tracing(config, &mut |at, why| problems.push(format!("{at}: {why}")));
    if !problems.is_empty() {
        anyhow::bail!("{}", problems.join("\n"));
    }
    wasmgate_observe::trace::install(&wasmgate_observe::trace::TraceSettings {
        endpoint: config.endpoint.clone(),
        protocol: match config.protocol {
            wasmgate_config::OtlpProtocol::Grpc => wasmgate_observe::trace::OtlpProtocol::Grpc,
            wasmgate_config::OtlpProtocol::Http => wasmgate_observe::trace::OtlpProtocol::Http,
        },
        ca_file: config
            .ca_file
            .as_ref()
            .map(|file| wasmgate_base::paths::resolve(base, file)),
        sample_ratio: config.sample_ratio,
        respect_sampled: config.respect_sampled,
        service_name: config.service_name.clone(),
        batch_delay: std::time::Duration::from_millis(config.batch_delay_ms),
        queue_spans: config.queue_spans,
    })
    .map_err(|e| anyhow::anyhow!(e))
}
