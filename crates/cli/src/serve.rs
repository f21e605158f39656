//! `wasmgate serve`: one Extism plugin's functions over HTTP, or one
//! `wasi:http` component answering every request.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use wasmgate_extism::PoolConfig;
use wasmgate_gateway::{
    ComponentRoute, ComponentRouteConfig, FunctionRoute, FunctionRouteConfig, Handler,
    ListenerConfig,
};

use crate::plugin_args::{millis, PluginArgs};

/// Call deadline when neither the manifest nor --timeout-ms sets one: a
/// server must not let one request run forever.
const DEFAULT_SERVE_TIMEOUT_MS: u64 = 30_000;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    plugin: PluginArgs,
    /// Function called for `/` (any path `/NAME` calls function NAME).
    function: Option<String>,
    /// Port to listen on.
    #[arg(long, short, default_value_t = 8080)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    address: String,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Threads for guest calls that run longer than 1 ms, at a lower CPU
    /// priority (default: one per CPU but one).
    #[arg(long, value_name = "N")]
    long_call_threads: Option<usize>,
    /// Nice value (0-19) of those threads: higher leaves more of a busy CPU
    /// to request handling and less to long calls.
    #[arg(long, value_name = "NICE", default_value_t = wasmgate_runtime::slow_lane::DEFAULT_NICE,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    long_call_nice: i32,
    /// Most instances of the plugin alive at once = most concurrent calls.
    #[arg(long, default_value_t = 64)]
    pool_size: usize,
    /// A fresh instance for every request (nothing shared between requests).
    #[arg(long)]
    isolation: bool,
    /// How long a request may wait for a free instance before a 503.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    queue_timeout_ms: u64,
    /// Largest request body, in bytes (413 beyond).
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Content-Type of successful responses (default: guessed from the output).
    #[arg(long)]
    content_type: Option<String>,
    /// Seconds in-flight requests get to finish on SIGTERM/SIGINT.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
    /// Whether a crashed call's answer carries its crash report (message,
    /// backtrace with source files and lines). On by default for local use;
    /// `--error-details false` on a server others reach: the answer then
    /// names the request id, under which the report is in the log.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    error_details: bool,
    /// The access log: one line per request to this file (appended to,
    /// reopened on SIGUSR1), `-` for standard output, `off` for none.
    #[arg(long, default_value = "-", value_name = "PATH|-|off")]
    access_log: String,
    /// The access log's lines: `json` or `text` (named fields).
    #[arg(long, default_value = "json", value_name = "json|text")]
    access_log_format: String,
    /// Traces: each request a span (with its function call's), exported over
    /// OTLP to this collector (`http://host:4317`, `https://` for TLS); W3C
    /// `traceparent` continued. Off without it.
    #[arg(long, value_name = "URL")]
    trace_endpoint: Option<String>,
    /// OTLP over `grpc` or `http` (protobuf to `<URL>/v1/traces`).
    #[arg(long, default_value = "grpc", value_name = "grpc|http")]
    trace_protocol: String,
    /// The CAs to trust for an `https://` trace endpoint (PEM); Mozilla's
    /// roots without it.
    #[arg(long, value_name = "FILE")]
    trace_ca_file: Option<String>,
    /// The share of new traces recorded, 0 to 1 (a request's sampled
    /// `traceparent` is followed).
    #[arg(long, default_value_t = 1.0, value_name = "RATIO")]
    trace_sample_ratio: f64,
    /// Components: an environment variable the guest reads, `KEY=VALUE`
    /// (repeatable; none by default).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
}

pub fn run(mut args: ServeArgs) -> Result<ExitCode> {
    args.plugin.pull_if_in_registry()?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(n) = args.long_call_threads {
        wasmgate_runtime::slow_lane::set_threads(n);
    }
    wasmgate_runtime::slow_lane::set_nice(args.long_call_nice);
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio.block_on(serve(args, threads))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: ServeArgs, threads: usize) -> Result<()> {
    let format = match args.access_log_format.as_str() {
        "json" => wasmgate_observe::Format::Json,
        "text" => wasmgate_observe::Format::Text,
        other => bail!("--access-log-format: `{other}` is neither json nor text"),
    };
    let log = args.access_log.as_str();
    crate::access_log::start(log != "off", log, format, Path::new("."))?;
    if let Some(endpoint) = &args.trace_endpoint {
        let protocol = match args.trace_protocol.as_str() {
            "grpc" => wasmgate_config::OtlpProtocol::Grpc,
            "http" => wasmgate_config::OtlpProtocol::Http,
            other => bail!("--trace-protocol: `{other}` is neither grpc nor http"),
        };
        let config = wasmgate_config::TracingConfig {
            endpoint: endpoint.clone(),
            protocol,
            ca_file: args.trace_ca_file.clone(),
            sample_ratio: args.trace_sample_ratio,
            ..wasmgate_config::TracingConfig::default()
        };
        crate::access_log::start_tracing(&config, Path::new("."))?;
    }
    if wasmgate_component::is_component_file(&args.plugin.plugin) {
        return serve_component(args, threads).await;
    }
    let mut manifest = args.plugin.manifest()?;
    manifest.timeout_ms.get_or_insert(DEFAULT_SERVE_TIMEOUT_MS);
    let runtime = args.plugin.runtime()?;
    let pool = PoolConfig {
        max_instances: args.pool_size,
        isolation: args.isolation,
        acquire_timeout: millis(args.queue_timeout_ms),
        idle_timeout: None,
    };
    let plugin = Arc::new(args.plugin.load(&runtime, pool, &manifest)?);
    if let Some(function) = &args.function {
        if !plugin.function_exists(function) {
            bail!(
                "plugin {} has no callable export `{function}` (Extism exports take no parameters and return nothing or an i32)",
                args.plugin.plugin.display()
            );
        }
    }
    let (address, listener) = bind(&args)?;
    tracing::info!(
        %address,
        plugin = plugin.name(),
        function = args.function.as_deref().unwrap_or("(none: use /<function>)"),
        pooling = runtime.pooling(),
        isolation = args.isolation,
        threads,
        "serving"
    );
    let route = Arc::new(FunctionRoute::new(
        plugin,
        FunctionRouteConfig {
            default_function: args.function.clone(),
            max_body_bytes: args.max_body_bytes,
            content_type: args.content_type.clone(),
            error_details: args.error_details,
        },
    ));
    serve_one(&args, listener, threads, route).await
}

fn bind(args: &ServeArgs) -> Result<(SocketAddr, std::net::TcpListener)> {
    let address: SocketAddr = format!("{}:{}", args.address, args.port)
        .parse()
        .with_context(|| format!("invalid listen address {}:{}", args.address, args.port))?;
    let listener =
        std::net::TcpListener::bind(address).with_context(|| format!("binding {address}"))?;
    Ok((address, listener))
}

/// Serves `route` on `listener` until a signal, then drains the access log.
async fn serve_one<H: Handler>(
    args: &ServeArgs,
    listener: std::net::TcpListener,
    threads: usize,
    route: Arc<H>,
) -> Result<()> {
    let config = ListenerConfig {
        shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace_secs),
        ..ListenerConfig::default()
    };
    let listening = vec![wasmgate_gateway::Listening {
        socket: listener,
        tls: None,
        max_connections: config.max_connections,
    }];
    serve_until_signal(listening, threads, route, config, async {}).await?;
    crate::access_log::drain();
    tracing::info!("stopped");
    Ok(())
}

/// `serve` for a `wasi:http` component: every request is the component's.
async fn serve_component(args: ServeArgs, threads: usize) -> Result<()> {
    if let Some(function) = &args.function {
        bail!("{} is a wasi:http component, which answers every path itself: drop the function name `{function}`", args.plugin.plugin.display());
    }
    let plugin = Arc::new(crate::component::load(
        &args.plugin,
        &args.env,
        args.pool_size,
        args.queue_timeout_ms,
    )?);
    let (address, listener) = bind(&args)?;
    tracing::info!(
        %address,
        plugin = plugin.name(),
        kind = "component (wasi:http)",
        threads,
        "serving"
    );
    let route = Arc::new(ComponentRoute::new(
        plugin,
        ComponentRouteConfig {
            max_body_bytes: args.max_body_bytes,
            error_details: args.error_details,
        },
    ));
    serve_one(&args, listener, threads, route).await
}

/// Serves on worker threads until SIGTERM or SIGINT, then lets them finish
/// their in-flight requests while `on_stop` runs (a cluster node leaves the
/// cluster then).
pub async fn serve_until_signal<H: Handler>(
    listeners: Vec<wasmgate_gateway::Listening>,
    threads: usize,
    handler: Arc<H>,
    config: ListenerConfig,
    on_stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers = wasmgate_gateway::serve_workers(listeners, threads, handler, config, stopped)?;
    shutdown_signal().await;
    tracing::info!("shutting down: waiting for in-flight requests");
    let _ = stop.send(true);
    let (finished, ()) = tokio::join!(workers.wait(), on_stop);
    finished
}

pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
