//! `wasmgate run`, `wasmgate check` and `wasmgate schema`: the gateway from
//! its configuration file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;
use wasmgate_admin::Admin;
use wasmgate_config::GatewayConfig;
use wasmgate_gateway::{Gateway, ListenerConfig, Listening, LiveGateway};
use wasmgate_runtime::{Runtime, RuntimeConfig};

use crate::plugin_args::default_cache_dir;

#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Fail (exit 1) when a plugin imports host functions wasmgate does not
    /// implement, instead of warning.
    #[arg(long)]
    strict: bool,
}

#[derive(Args)]
pub struct ConfigArgs {
    /// The gateway's configuration (YAML; see docs/gateway.md).
    #[arg(long, short, default_value = "wasmgate.yaml")]
    config: PathBuf,
    /// Do not cache compiled modules on disk.
    #[arg(long)]
    no_cache: bool,
    /// Where compiled modules are cached (default: ~/.cache/wasmgate).
    #[arg(long, env = "WASMGATE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Seconds in-flight requests get to finish on SIGTERM/SIGINT.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
    /// Do not reload when the configuration file or a plugin's module
    /// changes (SIGHUP and `POST /reload` on the admin listener still do).
    #[arg(long)]
    no_watch: bool,
    /// Serve traffic on this address instead of the file's `listen`
    /// (host:port; the file's `listeners` are kept).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Serve the admin API on this address instead of the file's `admin`.
    #[arg(long, value_name = "HOST:PORT")]
    admin: Option<String>,
}

impl ConfigArgs {
    /// The configuration file.
    pub fn file(&self) -> &std::path::Path {
        &self.config
    }
}

fn runtime(args: &ConfigArgs) -> Result<Runtime> {
    Runtime::new(RuntimeConfig {
        cache_dir: if args.no_cache {
            None
        } else {
            args.cache_dir.clone().or_else(default_cache_dir)
        },
        ..RuntimeConfig::default()
    })
}

/// Reads, checks and builds; errors are printed one per line with file and field.
pub async fn build(args: &ConfigArgs) -> Result<(Gateway, Runtime), String> {
    let config = GatewayConfig::load(&args.config).map_err(|e| e.to_string())?;
    build_config(config, args).await
}

/// [`build`] of a configuration already read from `args`' file.
pub async fn build_config(
    config: GatewayConfig,
    args: &ConfigArgs,
) -> Result<(Gateway, Runtime), String> {
    let runtime = runtime(args).map_err(|e| format!("{e:#}"))?;
    let gateway = Gateway::build(config, &args.config, &runtime, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok((gateway, runtime))
}

pub fn check(
    CheckArgs {
        config: args,
        strict,
    }: CheckArgs,
) -> Result<ExitCode> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    match tokio.block_on(build(&args)) {
        Ok((gateway, _)) => {
            // Problems first, so that the last line says how it ended.
            for (name, functions) in &gateway.unimplemented_imports {
                eprintln!(
                    "{}: {}: plugin {name} imports host functions that are not part of the Proxy-Wasm ABI wasmgate knows: {}; calls to them fail{}",
                    args.config.display(),
                    if strict { "error" } else { "warning" },
                    functions.join(", "),
                    if strict { "" } else { " (--strict makes this an error)" }
                );
            }
            if strict && !gateway.unimplemented_imports.is_empty() {
                eprintln!(
                    "{}: failed (--strict: a plugin imports functions wasmgate does not implement)",
                    args.config.display()
                );
                return Ok(ExitCode::FAILURE);
            }
            let config = gateway.config();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}: ok ({} routes, {} upstreams, {} plugins)",
                args.config.display(),
                config.routes.len(),
                config.upstreams.len(),
                config.plugins.len()
            )?;
            for (name, kind) in &gateway.plugin_kinds {
                match gateway.plugin_image(name) {
                    Some(image) => writeln!(out, "  plugin {name}: {kind}, from {image}")?,
                    None => writeln!(out, "  plugin {name}: {kind}")?,
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            eprintln!("{errors}{}", missing_file_hint(&args.config, "check"));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// For a configuration file that does not exist: how to name one.
fn missing_file_hint(file: &std::path::Path, command: &str) -> String {
    if file.exists() {
        return String::new();
    }
    format!(
        "\nhint: `wasmgate {command}` reads ./wasmgate.yaml unless `-c FILE` names another, e.g. `wasmgate {command} -c examples/gateway/wasmgate.yaml` (docs/gateway.md)"
    )
}

pub fn schema() -> Result<ExitCode> {
    let schema = wasmgate_config::json_schema();
    // One write, through `?`: a closed pipe ends the command quietly (main.rs).
    let text = serde_json::to_string_pretty(&schema)? + "\n";
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    wasmgate_config::node::set_overrides(wasmgate_config::node::NodeOverrides {
        listen: args.listen.clone(),
        admin: args.admin.clone(),
    });
    // The thread count comes from the file, so read it before the runtime starts.
    let config = match GatewayConfig::load(&args.config.config) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}{}", missing_file_hint(&args.config.config, "run"));
            return Ok(ExitCode::FAILURE);
        }
    };
    let threads = config
        .limits
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(n) = config.limits.long_call_threads {
        wasmgate_runtime::slow_lane::set_threads(n);
    }
    if let Some(nice) = config.limits.long_call_nice {
        wasmgate_runtime::slow_lane::set_nice(nice);
    }
    // The control plane (signals, admin, health checks, root contexts) runs
    // on this thread; traffic is served by `threads` workers of their own.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = tokio.block_on(serve(args, threads));
    // `serve` has drained the connections and flushed the log by now. A
    // component compile left running in the background (a blocking task:
    // minutes for a big component on a busy machine) must not hold the
    // exit, as dropping the runtime would: a SIGTERM is answered promptly.
    tokio.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

async fn serve(args: RunArgs, threads: usize) -> Result<ExitCode> {
    let node = GatewayConfig::load(&args.config.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    // A running node serves while a slow component compiles (`check`
    // waits for every compile).
    wasmgate_gateway::compile_components_in_background();
    let base = wasmgate_base::paths::config_dir(&args.config.config);
    let log = &node.access_log;
    crate::access_log::start(
        log.enabled,
        &log.path,
        crate::access_log::format_of(log.format),
        base,
    )
    .with_context(|| args.config.config.display().to_string())?;
    if let Some(tracing) = &node.tracing {
        crate::access_log::start_tracing(tracing, base)
            .with_context(|| args.config.config.display().to_string())?;
    }
    let from_kubernetes = node.config.as_ref().is_some_and(|c| c.kubernetes.is_some());
    let started = if from_kubernetes {
        let runtime = runtime(&args.config)?;
        match check_kubernetes_node_file(&node) {
            Ok(()) => wasmgate_kubernetes::start(node, &args.config.config, runtime).await,
            Err(e) => Err(e),
        }
    } else if node.config.is_some() {
        let runtime = runtime(&args.config)?;
        wasmgate_cluster::start(node, &args.config.config, runtime).await
    } else {
        build(&args.config).await.map(|(gateway, runtime)| {
            Arc::new(LiveGateway::new(gateway, &args.config.config, runtime))
        })
    };
    let live = match started {
        Ok(live) => live,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let config = live.current().config().clone();
    let listeners = bind_listeners(&config, &args.config.config)?;
    let listener_config = listener_config(&config.limits, args.shutdown_grace_secs);
    if let Some(admin) = &config.admin {
        let admin_listener = tokio::net::TcpListener::bind(admin)
            .await
            .with_context(|| {
                if args.admin.is_some() {
                    format!("--admin: cannot listen on {admin} (is another process using it? give another address)")
                } else {
                    format!(
                        "{}: admin: cannot listen on {admin} (is another process using it? change `admin`, or give `--admin HOST:PORT`)",
                        args.config.config.display()
                    )
                }
            })?;
        let handler = Arc::new(Admin::new(live.clone()));
        let admin_config = listener_config.clone();
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            if let Err(e) =
                wasmgate_gateway::serve(admin_listener, handler, admin_config, never).await
            {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
        tracing::info!(address = %admin, "admin listener (admin API, /metrics, /healthz, /readyz; see docs/admin.md)");
    }
    if let Some(probes) = &config.probes {
        let probes_listener = tokio::net::TcpListener::bind(probes).await.with_context(|| {
            format!(
                "{}: probes: cannot listen on {probes} (is another process using it? change `probes`)",
                args.config.config.display()
            )
        })?;
        let handler = Arc::new(wasmgate_admin::Probes { live: live.clone() });
        let probes_config = listener_config.clone();
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            if let Err(e) =
                wasmgate_gateway::serve(probes_listener, handler, probes_config, never).await
            {
                tracing::error!(error = %e, "probes listener failed");
            }
        });
        tracing::info!(address = %probes, "probes listener (/healthz, /readyz only)");
    }
    // Reloads: SIGHUP, and changes to the configuration or a plugin's module
    // (with etcd, the node follows etcd instead of its file).
    tokio::spawn(reload_on_sighup(live.clone()));
    tokio::spawn(live.clone().reload_when_compiled());
    if !args.no_watch && live.store().is_none() {
        tokio::spawn(live.clone().watch(WATCH_INTERVAL));
    }
    let addresses: Vec<String> = config
        .all_listeners()
        .iter()
        .map(|l| {
            format!(
                "{}{}",
                if l.tls.is_some() {
                    "https://"
                } else {
                    "http://"
                },
                l.address
            )
        })
        .collect();
    tracing::info!(
        listeners = ?addresses,
        threads,
        routes = config.routes.len(),
        upstreams = config.upstreams.len(),
        plugins = config.plugins.len(),
        "gateway listening"
    );
    let store = live.store().cloned();
    let leave = async move {
        if let Some(store) = store {
            store.leave().await;
        }
    };
    crate::serve::serve_until_signal(listeners, threads, live, listener_config, leave).await?;
    crate::access_log::drain();
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Binds every traffic listener of `config` (read from `file`); an address
/// that cannot be bound is an error naming its setting and the file.
fn bind_listeners(config: &GatewayConfig, file: &std::path::Path) -> Result<Vec<Listening>> {
    let overridden = wasmgate_config::node::overrides().listen.is_some();
    let field = |i: usize| match (&config.listen, i) {
        (Some(_), 0) => "listen".to_string(),
        (Some(_), i) => format!("listeners[{}]", i - 1),
        (None, _) if config.listeners.is_empty() => "listen (the default)".to_string(),
        (None, i) => format!("listeners[{i}]"),
    };
    config
        .all_listeners()
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let socket = std::net::TcpListener::bind(&l.address).with_context(|| {
                let plain = i == 0 && config.listen.is_some();
                if plain && overridden {
                    format!(
                        "--listen: cannot listen on {} (is another process using it? give another address)",
                        l.address
                    )
                } else {
                    format!(
                        "{}: {}: cannot listen on {} (is another process using it? change the address{})",
                        file.display(),
                        field(i),
                        l.address,
                        if plain { ", or give `--listen HOST:PORT`" } else { "" }
                    )
                }
            })?;
            Ok(Listening {
                socket,
                tls: l.tls.as_ref().map(|_| l.address.as_str().into()),
                max_connections: l.max_connections.unwrap_or(config.limits.max_connections),
            })
        })
        .collect()
}

/// How the node's listeners serve connections, from its `limits`.
fn listener_config(limits: &wasmgate_config::Limits, shutdown_grace_secs: u64) -> ListenerConfig {
    let ms = Duration::from_millis;
    ListenerConfig {
        header_read_timeout: ms(limits.header_read_timeout_ms),
        shutdown_grace: Duration::from_secs(shutdown_grace_secs),
        http2: wasmgate_gateway::Http2Limits {
            idle_timeout: ms(limits.http2_idle_timeout_ms),
            keepalive_interval: (limits.http2_keepalive_interval_ms > 0)
                .then(|| ms(limits.http2_keepalive_interval_ms)),
            keepalive_timeout: ms(limits.http2_keepalive_timeout_ms),
            max_concurrent_streams: limits.http2_max_concurrent_streams,
            max_header_list_bytes: limits.http2_max_header_list_bytes,
        },
        max_connections: limits.max_connections,
    }
}

/// How often the configuration file and plugin modules are checked for changes.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

async fn reload_on_sighup(live: Arc<LiveGateway>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!(
            "cannot listen for SIGHUP; reload through the file watcher or the admin API"
        );
        return;
    };
    while hangup.recv().await.is_some() {
        let _ = live.reload("SIGHUP").await;
    }
}

/// A node following Kubernetes takes its routes and upstreams from the API
/// server; its file may still declare plugins, services and global filters.
fn check_kubernetes_node_file(node: &wasmgate_config::GatewayConfig) -> Result<(), String> {
    if node.routes.is_empty() && node.upstreams.is_empty() {
        return Ok(());
    }
    Err("this node's routes and upstreams come from Kubernetes (`config.kubernetes`): its file may not declare `routes` or `upstreams` (plugins, services and global_plugins stay in the file)".into())
}
