//! `serve` with a `wasi:http` component: which of the shared plugin flags
//! apply (outbound hosts, directories, memory cap, deadline, the cache), and
//! which do not (an Extism manifest's config, vars, services).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use wasmgate_component::{ComponentOptions, ComponentPlugin, Preopen};
use wasmgate_extism::PoolConfig;
use wasmgate_runtime::PrecompiledPolicy;

use crate::plugin_args::PluginArgs;

/// Call deadline when --timeout-ms sets none (as for Extism plugins).
const DEFAULT_TIMEOUT_MS: u64 = 30_000;

pub fn load(
    args: &PluginArgs,
    env: &[String],
    pool_size: usize,
    queue_timeout_ms: u64,
) -> Result<ComponentPlugin> {
    let not_for_components = [
        ("--config", !args.config.is_empty()),
        ("--service", !args.services.is_empty()),
        ("--max-var-bytes", args.max_var_bytes.is_some()),
        (
            "--max-http-response-bytes",
            args.max_http_response_bytes.is_some(),
        ),
    ];
    if let Some((flag, _)) = not_for_components.iter().find(|(_, given)| *given) {
        bail!(
            "{flag} is for Extism plugins; {} is a wasi:http component",
            args.plugin.display()
        );
    }
    // `--allow-path` as an Extism manifest takes it (`ro:` kept on the host side).
    let preopens = (args.manifest()?.allowed_paths.unwrap_or_default().iter())
        .map(|(host, guest)| Preopen::new(host, &guest.to_string_lossy()))
        .collect();
    let env = env
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--env {pair:?}: expected KEY=VALUE"))
        })
        .collect::<Result<Vec<_>>>()?;
    let name = args.name.clone().unwrap_or_else(|| {
        args.plugin
            .file_stem()
            .map_or_else(|| "component".into(), |s| s.to_string_lossy().into_owned())
    });
    let runtime = args.runtime()?;
    let precompiled = match args.allow_precompiled {
        true => PrecompiledPolicy::Allowed,
        false => PrecompiledPolicy::Refused,
    };
    let (component, _) = runtime
        .load_component_file(&args.plugin, precompiled)
        .context("loading the component")?;
    let options = ComponentOptions {
        name,
        memory_limit: args.memory_limit.map(|mib| (mib as usize) << 20),
        timeout: Some(Duration::from_millis(
            args.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        )),
        allowed_hosts: args.allowed_hosts.clone(),
        preopens,
        env,
        pool: PoolConfig {
            max_instances: pool_size,
            isolation: true,
            acquire_timeout: Duration::from_millis(queue_timeout_ms),
            idle_timeout: None,
        },
    };
    ComponentPlugin::new(&runtime, &component, options)
        .with_context(|| format!("loading {}", args.plugin.display()))
}
