//! `wasmgate config push` (docs/cluster.md). A node whose configuration is
//! in etcd starts in `wasmgate_cluster::start` (`gateway.rs` calls it, as it
//! calls `wasmgate_kubernetes::start`).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use wasmgate_cluster::access::EtcdAccess;
use wasmgate_config::GatewayConfig;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Publish a configuration file's routes, upstreams, plugins, services
    /// and global plugins to etcd, replacing what is there; every node
    /// watching the prefix applies it.
    Push(PushArgs),
}

#[derive(Args)]
pub struct PushArgs {
    /// The configuration to publish. It is checked first as `wasmgate check`
    /// checks it (every plugin loaded, hashed and configured) and refused
    /// if that fails: nodes would reject it anyway.
    #[command(flatten)]
    config: crate::gateway::ConfigArgs,
    /// Check only the file itself (fields, references, names), without
    /// loading the plugins: for a machine that cannot reach the modules.
    /// Nodes still refuse a configuration whose plugins do not load.
    #[arg(long)]
    no_load: bool,
    /// etcd endpoints (repeatable, or comma-separated), reached in plain
    /// `http://` with no user; for TLS, a user or sealed objects use `--node`.
    #[arg(long, value_delimiter = ',', required_unless_present = "node")]
    etcd: Vec<String>,
    /// Reach etcd as this node file's `config` section says: its endpoints,
    /// prefix, `etcd_tls`, `etcd_auth`, and `encryption` keys (every object
    /// is sealed with the first).
    #[arg(long, conflicts_with_all = ["etcd", "prefix"])]
    node: Option<std::path::PathBuf>,
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
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let checked = if args.no_load {
        GatewayConfig::load(args.config.file()).map_err(|e| e.to_string())
    } else {
        GatewayConfig::load(args.config.file())
            .map_err(|e| e.to_string())
            .and_then(|mut config| {
                // Nodes read what is pushed from etcd, where a precompiled
                // module never loads (native code): refuse it here, even
                // when the file allows precompiled modules for itself.
                config.allow_precompiled = false;
                tokio.block_on(crate::gateway::build_config(config, &args.config))
            })
            .map(|(gateway, _)| {
                // Tags are published pinned to the digests they resolved
                // to here: every node pulls the same bytes.
                let mut config = gateway.config().clone();
                gateway.pin_images(&mut config.plugins);
                config
            })
    };
    let mut config = match checked {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}\nnothing was pushed");
            return Ok(ExitCode::FAILURE);
        }
    };
    let base = wasmgate_base::paths::config_dir(args.config.file());
    if let Err(e) = inline_certificates(&mut config, base) {
        eprintln!("{}: {e}\nnothing was pushed", args.config.file().display());
        return Ok(ExitCode::FAILURE);
    }
    // Password files likewise, as the services' URL passwords.
    for service in &mut config.services {
        match service.with_password_inlined() {
            Ok(inlined) => *service = inlined,
            Err(e) => {
                let file = args.config.file().display();
                eprintln!(
                    "{file}: services[{}].password_file: {e:#}\nnothing was pushed",
                    service.name
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let (access, prefix) = match &args.node {
        None => (EtcdAccess::plain(&args.etcd), args.prefix.clone()),
        Some(file) => match node_access(file) {
            Ok(found) => found,
            Err(e) => {
                eprintln!("{}: {e:#}\nnothing was pushed", file.display());
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let pushed = tokio.block_on(wasmgate_cluster::push::push(&config, &access, &prefix))?;
    println!(
        "{}: pushed {} objects to {} under {}{} (revision {}; {} deleted; {} transaction{})",
        args.config.file().display(),
        pushed.written,
        access.endpoints.join(", "),
        prefix,
        if access.keyring.is_some() {
            ", sealed"
        } else {
            ""
        },
        pushed.revision,
        pushed.deleted,
        pushed.transactions,
        if pushed.transactions == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// How a node file (`--node`) reaches etcd, and its prefix.
fn node_access(file: &std::path::Path) -> Result<(EtcdAccess, String)> {
    let node = GatewayConfig::load(file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(source) = node.config.filter(|c| !c.etcd.is_empty()) else {
        anyhow::bail!("not a node file of an etcd cluster: it has no `config.etcd`");
    };
    let base = wasmgate_base::paths::config_dir(file);
    let prefix = source.prefix.clone();
    Ok((EtcdAccess::new(&source, base)?, prefix))
}

/// Certificates given as files (`cert`, `key`) are published as their PEM
/// text (`cert_pem`, `key_pem`): the nodes do not share the pusher's files.
fn inline_certificates(config: &mut GatewayConfig, base: &std::path::Path) -> Result<(), String> {
    for (i, certificate) in config.certificates.iter_mut().enumerate() {
        for (file, text) in [
            (&mut certificate.cert, &mut certificate.cert_pem),
            (&mut certificate.key, &mut certificate.key_pem),
        ] {
            if let Some(path) = file.take() {
                let path = wasmgate_base::paths::resolve(base, path);
                *text = Some(std::fs::read_to_string(&path).map_err(|e| {
                    format!("certificates[{i}]: cannot read {}: {e}", path.display())
                })?);
            }
        }
    }
    Ok(())
}
