//! Log output: human-readable or JSON lines, level from `--log-level` or `RUST_LOG`.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
pub struct LogArgs {
    /// Log filter, e.g. `info` or `wasmgate=debug` (default: RUST_LOG, else `info`).
    #[arg(long, global = true, env = "WASMGATE_LOG")]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

pub fn init(args: &LogArgs) {
    let filter = match &args.log_level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
