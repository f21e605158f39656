//! `wasmgate compile`: ahead-of-time compilation to a .cwasm.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use wasmgate_extism::{Runtime, RuntimeConfig};

#[derive(Args)]
pub struct CompileArgs {
    /// The .wasm (or .wat) module to compile.
    input: PathBuf,
    /// Where to write the artifact (default: the input with a .cwasm extension).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: CompileArgs) -> Result<ExitCode> {
    let wasm =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let runtime = Runtime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })?;
    let artifact = runtime
        .precompile(&wasm)
        .with_context(|| format!("compiling {}", args.input.display()))?;
    let output = args
        .output
        .unwrap_or_else(|| args.input.with_extension("cwasm"));
    let tmp = output.with_extension("cwasm.tmp");
    std::fs::write(&tmp, &artifact).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &output)?;
    eprintln!("wrote {} ({} bytes)", output.display(), artifact.len());
    Ok(ExitCode::SUCCESS)
}
