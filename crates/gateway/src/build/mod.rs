//! Building a [`Gateway`] from its configuration, section by section:
//! services (shared with the running gateway where unchanged), upstreams,
//! plugins (fetched, compiled, checked: `plugins.rs`, `fetch.rs`), then
//! routes with their filter chains and endpoints (`routes.rs`). Building is
//! all-or-nothing: every error is collected with the field it comes from,
//! and a gateway that builds is one that can serve.

mod fetch;
mod plugins;
mod routes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmgate_config::{ConfigError, ConfigErrors, GatewayConfig};
use wasmgate_proxy_wasm::Runtime;
use wasmgate_services::Services;

use crate::router::RouteIndex;
use crate::upstream::Upstream;
use crate::Gateway;

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
        let services = build_services(&config, previous, &mut problems);
        let upstreams = build_upstreams(&config);
        let base = file.parent().unwrap_or(Path::new("."));
        let plugins = plugins::load(&config, base, runtime, &services, &mut problems).await;
        let routes = routes::build(
            &config,
            &plugins,
            &upstreams,
            &services,
            runtime,
            &mut problems,
        )
        .await;
        if !problems.found.is_empty() {
            return Err(ConfigErrors(problems.found));
        }
        Ok(Gateway {
            route_index: RouteIndex::new(routes.iter().map(|r| &r.matcher)),
            routes,
            upstreams,
            config,
            plugin_kinds: plugins.kinds,
            plugin_hashes: plugins.hashes,
            unimplemented_imports: plugins.unimplemented,
            services,
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
            problems.add(format!("services[{i}] ({name})"), message);
            Services::new()
        }
    }
}

/// Every upstream, by name: its nodes' pools and its health probes start now.
fn build_upstreams(config: &GatewayConfig) -> Arc<HashMap<String, Arc<Upstream>>> {
    Arc::new(
        config
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), Upstream::new(u)))
            .collect(),
    )
}
