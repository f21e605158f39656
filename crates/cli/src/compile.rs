//! `wasmgate compile`: ahead-of-time compilation to a .cwasm.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use wasmgate_extism::{Runtime, RuntimeConfig};

#[derive(Args)]
pub struct CompileArgs {
    /// The .wasm (or .wat) module to compile, or an image in an OCI
    /// registry (oci://registry/repository:tag or @sha256:...).
    input: PathBuf,
    #[command(flatten)]
    registry: crate::registry_args::RegistryArgs,
    /// Where modules pulled from a registry are kept (default:
    /// $XDG_CACHE_HOME/wasmgate or ~/.cache/wasmgate).
    #[arg(long, env = "WASMGATE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Where to write the artifact (default: the input with a .cwasm extension).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: CompileArgs) -> Result<ExitCode> {
    let from_registry = wasmgate_oci::is_oci(&args.input.to_string_lossy());
    let cache_dir = args
        .cache_dir
        .clone()
        .or_else(crate::plugin_args::default_cache_dir);
    let file = args
        .registry
        .local_file(&args.input, cache_dir.as_deref())?;
    let wasm = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let runtime = Runtime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })?;
    let artifact = runtime
        .precompile(&wasm)
        .with_context(|| format!("compiling {}", args.input.display()))?;
    let output = match (args.output, from_registry) {
        (Some(output), _) => output,
        (None, false) => args.input.with_extension("cwasm"),
        (None, true) => anyhow::bail!("a module from a registry needs `--output FILE.cwasm`"),
    };
    let tmp = output.with_extension("cwasm.tmp");
    std::fs::write(&tmp, &artifact).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &output)?;
    eprintln!("wrote {} ({} bytes)", output.display(), artifact.len());
    Ok(ExitCode::SUCCESS)
}
