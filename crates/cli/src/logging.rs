//! Log output: human-readable or JSON lines, level from `--log-level` or
//! `RUST_LOG`. Colour only when stderr is a terminal and `NO_COLOR` is unset
//! (no-color.org), so a log written to a file or a pipe is plain text.

use std::io::IsTerminal;

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

/// rustls's parser warns about what a client sends (an IP address given
/// as SNI, which `openssl s_time` does): one line per handshake that any
/// client can make the node write, and nothing an operator can act on.
/// Kept to errors unless the filter names rustls itself.
const QUIET_RUSTLS: &str = "rustls::msgs=error";

pub fn init(args: &LogArgs) {
    let asked = (args.log_level.clone()).or_else(|| std::env::var("RUST_LOG").ok());
    let mut filter = match &args.log_level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    if !asked.is_some_and(|a| a.contains("rustls")) {
        filter = filter.add_directive(QUIET_RUSTLS.parse().expect("a valid directive"));
    }
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
