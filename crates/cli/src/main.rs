//! The `wasmgate` command.

mod access_log;
mod call;
mod cluster;
mod compile;
mod component;
mod gateway;
mod logging;
mod plugin_args;
mod registry_args;
mod serve;

use clap::{Parser, Subcommand};

/// Request handling allocates small, short-lived objects on every worker
/// thread; mimalloc's per-thread free lists serve them faster than glibc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "wasmgate",
    version,
    about = "Run WebAssembly plugins as HTTP microservices and gateway filters"
)]
struct Cli {
    #[command(flatten)]
    logging: logging::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve an Extism plugin's functions over HTTP (POST body in, output out),
    /// or a wasi:http component (it answers every request).
    Serve(Box<serve::ServeArgs>),
    /// Call an Extism plugin function once and print its output (like `extism call`).
    Call(Box<call::CallArgs>),
    /// Compile a module ahead of time into a .cwasm for this wasmgate version.
    Compile(compile::CompileArgs),
    /// Run the gateway: routes, upstreams and Proxy-Wasm filter chains from a YAML file.
    Run(gateway::RunArgs),
    /// Check a gateway configuration and load its plugins; exits non-zero with every error.
    Check(gateway::CheckArgs),
    /// Print the JSON Schema of the gateway configuration file.
    Schema,
    /// A cluster's configuration in etcd (docs/cluster.md).
    #[command(subcommand)]
    Config(cluster::ConfigCommand),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.logging);
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Call(args) => call::run(*args),
        Command::Compile(args) => compile::run(args),
        Command::Run(args) => gateway::run(args),
        Command::Check(args) => gateway::check(args),
        Command::Schema => gateway::schema(),
        Command::Config(command) => cluster::config(command),
    };
    match result {
        Ok(code) => code,
        // The reader went away (`wasmgate schema | head`): stop quietly, as
        // Unix tools do.
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
