//! `wasmgate run` on a node whose configuration is in etcd, and `wasmgate
//! config push` (docs/cluster.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Args, Subcommand};
use wasmgate_cluster::EtcdStore;
use wasmgate_gateway::config::GatewayConfig;
use wasmgate_gateway::{Gateway, LiveGateway};
use wasmgate_runtime::Runtime;
use wasmgate_services::Services;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Publish a configuration file's routes, upstreams, plugins, services
    /// and global plugins to etcd, replacing what is there; every node
    /// watching the prefix applies it.
    Push(PushArgs),
}

#[derive(Args)]
pub struct PushArgs {
    /// The configuration to publish (checked first, as `wasmgate check` does).
    #[arg(long, short)]
    config: PathBuf,
    /// etcd endpoints (repeatable, or comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    etcd: Vec<String>,
    /// The key prefix the nodes watch.
    #[arg(long, default_value = "/wasmgate")]
    prefix: String,
}

pub fn config(command: ConfigCommand) -> Result<ExitCode> {
    match command {
        ConfigCommand::Push(args) => push(args),
    }
}

fn push(args: PushArgs) -> Result<ExitCode> {
    let config = match GatewayConfig::load(&args.config) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let pushed = tokio.block_on(wasmgate_cluster::push::push(
        &config,
        &args.etcd,
        &args.prefix,
    ))?;
    println!(
        "pushed {} objects to {} under {} (revision {}; {} deleted; {} transaction{})",
        pushed.written,
        args.etcd.join(", "),
        args.prefix,
        pushed.revision,
        pushed.deleted,
        pushed.transactions,
        if pushed.transactions == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// A node's own file, in etcd mode, holds only the node's settings.
pub fn check_node_file(config: &GatewayConfig) -> Result<(), String> {
    let held: Vec<&str> = [
        ("routes", config.routes.is_empty()),
        ("upstreams", config.upstreams.is_empty()),
        ("plugins", config.plugins.is_empty()),
        ("services", config.services.is_empty()),
        ("global_plugins", config.global_plugins.is_empty()),
    ]
    .into_iter()
    .filter(|(_, empty)| !empty)
    .map(|(section, _)| section)
    .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(format!(
        "this node's configuration comes from etcd (`config.etcd`), so its file holds only the node's own settings; move {} to etcd with `wasmgate config push`",
        held.join(", ")
    ))
}

/// Starts a node in etcd mode: it answers 503 (and `/readyz` 503) until the
/// configuration arrives from etcd (or its cache file), then serves it and
/// follows every change; it registers itself for `GET /cluster`.
pub async fn start(
    node: GatewayConfig,
    file: &std::path::Path,
    runtime: Runtime,
) -> Result<Arc<LiveGateway>, String> {
    check_node_file(&node)?;
    let mut waiting = node.clone();
    waiting.routes = GatewayConfig::parse(
        r#"routes:
  - name: _waiting_for_configuration
    respond:
      status: 503
      headers: {content-type: application/json, retry-after: "1"}
      body: '{"error":{"kind":"no_configuration","message":"this node has no configuration yet: it is waiting for etcd (docs/cluster.md)"}}'
"#,
    )
    .expect("the placeholder route parses")
    .routes;
    let services = Arc::new(Services::new());
    let gateway = Gateway::build(waiting, file, &runtime, &services)
        .await
        .map_err(|e| e.to_string())?;
    let live = Arc::new(LiveGateway::new(gateway, file, runtime, services));
    live.set_ready(false);
    let store = EtcdStore::new(node, &live).map_err(|e| format!("{e:#}"))?;
    live.set_store(store.clone());
    tokio::spawn(store.clone().run());
    tokio::spawn(wasmgate_cluster::nodes::register(store));
    Ok(live)
}
