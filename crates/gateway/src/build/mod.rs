//! Building a [`Gateway`] from its configuration, section by section:
//! services (shared with the running gateway where unchanged), upstreams,
//! plugins (fetched by `wasmgate_oci::fetch`, compiled, checked: `plugins.rs`), then
//! routes with their filter chains and endpoints (`routes.rs`). Building is
//! all-or-nothing: every error is collected with the field it comes from,
//! and a gateway that builds is one that can serve.

pub mod background;
pub(crate) mod plugins;
mod routes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmgate_config::{ConfigError, ConfigErrors, GatewayConfig};
use wasmgate_proxy_wasm::Runtime;
use wasmgate_services::Services;

use crate::gateway::CertificateInfo;
use crate::Gateway;
use wasmgate_routing::router::RouteIndex;
use wasmgate_transport::tls::{self, TlsAcceptorConfig};
use wasmgate_upstream::Upstream;

/// Problems found while building, each with the file and field.
pub(crate) struct Problems {
    file: PathBuf,
    found: Vec<ConfigError>,
}

impl Problems {
    pub(crate) fn add(&mut self, field: String, message: String) {
        self.found.push(ConfigError {
            file: self.file.clone(),
            field,
            message,
        });
    }
}

impl Gateway {
    /// Loads every plugin and builds every route of `config` (read from
    /// `file`). Services whose configuration is as in `previous` (the
    /// gateway serving now, if any) are shared with it, connections and
    /// all; `previous` itself is not changed.
    pub async fn build(
        config: GatewayConfig,
        file: &Path,
        runtime: &Runtime,
        previous: Option<&Gateway>,
    ) -> Result<Gateway, ConfigErrors> {
        let mut problems = Problems {
            file: file.to_path_buf(),
            found: Vec::new(),
        };
        let base = wasmgate_base::paths::config_dir(file);
        let services = build_services(&config, previous, &mut problems);
        let (tls, certificates, listener_problems) = build_tls(&config, base, &mut problems);
        let upstreams = build_upstreams(&config, base, &mut problems);
        let mut plugins = plugins::load(&config, base, runtime, &services, &mut problems).await;
        plugins.keep_previous_while_compiling(previous);
        let built = routes::build(
            &config,
            &plugins,
            &upstreams,
            &services,
            runtime,
            previous,
            &mut problems,
        )
        .await;
        let routes = built.routes;
        if !problems.found.is_empty() {
            return Err(ConfigErrors(problems.found));
        }
        let components = plugins.components();
        Ok(Gateway {
            route_index: RouteIndex::new(routes.iter().map(|r| &r.matcher)),
            routes,
            upstreams,
            config,
            plugin_kinds: plugins.kinds,
            plugin_hashes: plugins.hashes,
            plugin_images: plugins.images,
            components,
            unimplemented_imports: plugins.unimplemented,
            compiling: plugins.compiling,
            filters: built.filters,
            filters_kept: built.filters_kept,
            filters_starting: built.filters_starting,
            services,
            tls,
            certificates,
            listener_problems,
        })
    }
}

/// The services of `config`, sharing those of the running gateway whose
/// configuration is unchanged.
fn build_services(
    config: &GatewayConfig,
    previous: Option<&Gateway>,
    problems: &mut Problems,
) -> Services {
    let none = Services::new();
    let running = previous.map_or(&none, |g| g.services());
    match Services::build(&config.services, running) {
        Ok(built) => built,
        Err((name, message)) => {
            let i = config
                .services
                .iter()
                .position(|s| s.name == name)
                .unwrap_or(0);
            problems.add(wasmgate_config::names::entry("services", i, &name), message);
            Services::new()
        }
    }
}

/// Every upstream, by name: its nodes' pools and its health probes start
/// now. An upstream whose TLS settings do not load is left out (and the
/// problem recorded).
fn build_upstreams(
    config: &GatewayConfig,
    base: &Path,
    problems: &mut Problems,
) -> Arc<HashMap<String, Arc<Upstream>>> {
    let mut upstreams = HashMap::with_capacity(config.upstreams.len());
    for (i, u) in config.upstreams.iter().enumerate() {
        match Upstream::new(u, base) {
            Ok(upstream) => {
                upstreams.insert(u.name.clone(), upstream);
            }
            Err(message) => problems.add(
                format!(
                    "{}.tls",
                    wasmgate_config::names::entry("upstreams", i, &u.name)
                ),
                message,
            ),
        }
    }
    Arc::new(upstreams)
}

/// What [`build_tls`] gives: each TLS listener's acceptor by its address,
/// the certificates served, and each listener's problem by its address.
type BuiltTls = (
    Vec<(String, TlsAcceptorConfig)>,
    Vec<CertificateInfo>,
    Vec<(String, String)>,
);

/// The certificates, each TLS listener's acceptor by its address, and
/// what the listeners lack (certificates they name that are not there).
fn build_tls(config: &GatewayConfig, base: &Path, problems: &mut Problems) -> BuiltTls {
    let loaded = match tls::load_certificates(&config.certificates, base) {
        Ok(loaded) => loaded,
        Err((field, message)) => {
            problems.add(field, message);
            return (Vec::new(), Vec::new(), Vec::new());
        }
    };
    let mut lacking = Vec::new();
    let mut acceptors = Vec::new();
    let listeners = config.all_listeners();
    let first_tls = usize::from(config.listen.is_some() || config.listeners.is_empty());
    for (i, listener) in listeners.iter().enumerate() {
        let Some(settings) = &listener.tls else {
            continue;
        };
        if let Some(problem) = lacks(&settings.certificates, &loaded) {
            tracing::warn!(listener = %listener.address, "this TLS listener {problem}");
            lacking.push((listener.address.clone(), problem));
        }
        match tls::server_config(&listener.address, settings, &loaded, base) {
            Ok(server) => acceptors.push((
                listener.address.clone(),
                TlsAcceptorConfig {
                    server,
                    handshake_timeout: Duration::from_millis(settings.handshake_timeout_ms),
                    requires_client_certificate: settings.client_auth
                        == wasmgate_config::ClientAuth::Required,
                },
            )),
            Err(message) => problems.add(format!("listeners[{}].tls", i - first_tls), message),
        }
    }
    let certificates = loaded
        .into_iter()
        .map(|c| CertificateInfo {
            name: c.name,
            names: c.names,
            subject: c.subject,
            not_after: c.not_after,
        })
        .collect();
    (acceptors, certificates, lacking)
}

/// What a TLS listener naming `wanted` (none: every certificate) lacks
/// among the `loaded` ones, said for operators. Only a cluster node gets
/// here with something missing (a file's listeners must name declared
/// certificates): its certificates may be written after it starts.
fn lacks(wanted: &[String], loaded: &[tls::LoadedCertificate]) -> Option<String> {
    let has = |name: &String| loaded.iter().any(|c| &c.name == name);
    if loaded.is_empty() || (!wanted.is_empty() && !wanted.iter().any(has)) {
        return Some(
            "has no certificate to serve yet: it refuses every handshake until one is configured"
                .into(),
        );
    }
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|name| !has(name))
        .map(String::as_str)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "names certificates not configured yet ({}): their names have no certificate of their own",
            missing.join(", ")
        )
    })
}
