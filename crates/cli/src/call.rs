//! `wasmgate call`: one call, output to stdout.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use clap::Args;
use serde_json::json;
use wasmgate_extism::PoolConfig;

use crate::plugin_args::PluginArgs;

#[derive(Args)]
pub struct CallArgs {
    #[command(flatten)]
    plugin: PluginArgs,
    /// Function to call.
    function: String,
    /// Input to the function (default: stdin when it is not a terminal,
    /// otherwise empty).
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,
    /// Read the input from a file (`-` for stdin).
    #[arg(long)]
    input_file: Option<PathBuf>,
    /// Call N times on the same plugin (vars persist), one output per line.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Print one JSON object per call: `{"ok":true,"output_b64":...}` or
    /// `{"ok":false,"kind":...,"error":...}`; always exits 0 once the plugin loaded.
    #[arg(long)]
    json: bool,
}

pub fn run(mut args: CallArgs) -> Result<ExitCode> {
    args.plugin.pull_if_in_registry()?;
    let input = match (&args.input, &args.input_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf)?;
            buf
        }
        (None, Some(path)) => {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        }
        // `echo x | wasmgate call ...`: stdin when it is not a terminal.
        (None, None) if !std::io::stdin().is_terminal() => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf)?;
            buf
        }
        (None, None) => Vec::new(),
    };
    let manifest = args.plugin.manifest()?;
    let runtime = args.plugin.runtime()?;
    let plugin = args
        .plugin
        .load(&runtime, PoolConfig::default(), &manifest)?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut stdout = std::io::stdout().lock();
    for i in 0..args.repeat {
        let result = tokio.block_on(plugin.call(&args.function, &input));
        if args.json {
            let line = match &result {
                Ok(output) => json!({"ok": true, "output_b64": BASE64.encode(output)}),
                Err(error) => {
                    json!({"ok": false, "kind": error.kind(), "error": error.to_string()})
                }
            };
            writeln!(stdout, "{line}")?;
            continue;
        }
        match result {
            Ok(output) => {
                stdout.write_all(&output)?;
                if args.repeat > 1 && i + 1 < args.repeat {
                    stdout.write_all(b"\n")?;
                }
            }
            Err(error) => {
                stdout.flush()?;
                eprintln!("error ({}): {error}", error.kind());
                return Ok(ExitCode::from(1));
            }
        }
    }
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
