//! Services plugins reach through the host: Redis and PostgreSQL.
//!
//! A plugin never opens a connection of its own. The operator names each
//! service once (`services:` in the gateway configuration, `--service` on
//! `serve`), grants it to the plugins that may use it, and the host owns the
//! connections: one bounded pool per service and node, with timeouts for
//! connecting, waiting for a pooled connection and each command. So a
//! plugin's query costs a query, not a connection (TLS and SCRAM make a fresh
//! PostgreSQL connection several round trips; docs/benchmarks.md).
//!
//! Both ABIs call into this crate: Proxy-Wasm filters through Higress's
//! Redis extension (`proxy_redis_call`, raw RESP in and out), Extism plugins
//! through the `wasmgate:host/services` import module (JSON in and out; the
//! contract is in docs/services.md). Everything here is async and waits
//! without blocking a thread: a guest call waits on its fiber.
//!
//! - [`config`]: what the operator writes.
//! - [`Services`]: every configured service, kept across reloads while its
//!   configuration is unchanged (so reloads keep warm connections).
//! - [`Grants`]: the services one plugin may use.
//! - [`redis`], [`postgres`]: the pools and the operations.
//! - [`stats`]: calls, errors, latency and pool gauges per service.
//! - [`calls`]: each call of a traced request, for its trace's spans.
//! - [`outbound_http`]: the hosts a plugin may reach over HTTP, and the
//!   pooled client every ABI sends plugins' requests with.

pub mod calls;
pub mod config;
pub mod outbound_http;
mod pg_values;
pub mod postgres;
pub mod redis;
pub mod stats;

use std::collections::HashMap;
use std::sync::Arc;

pub use config::{ServiceConfig, ServiceKind};
pub use stats::ServiceStats;

/// Why an operation on a service failed; `kind()` is the name plugins see.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No service of that name (and kind) is granted to the plugin.
    #[error("{0}")]
    NotGranted(String),
    /// The request is malformed or a value cannot be converted.
    #[error("{0}")]
    BadRequest(String),
    /// No connection could be had: down, refusing, bad credentials, or the
    /// pool stayed full.
    #[error("{0}")]
    Unavailable(String),
    /// The operation did not finish in the service's `timeout_ms`.
    #[error("{0}")]
    Timeout(String),
    /// Redis answered with an error reply.
    #[error("{0}")]
    Redis(String),
    /// PostgreSQL refused the statement (`code` is its SQLSTATE).
    #[error("{message}")]
    Query { message: String, code: String },
}

impl ServiceError {
    pub fn kind(&self) -> &'static str {
        match self {
            ServiceError::NotGranted(_) => "not_granted",
            ServiceError::BadRequest(_) => "bad_request",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::Timeout(_) => "timeout",
            ServiceError::Redis(_) => "redis",
            ServiceError::Query { .. } => "query",
        }
    }

    /// The error as plugins receive it: `{"kind", "message", "code"?}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut error = serde_json::json!({ "kind": self.kind(), "message": self.to_string() });
        if let ServiceError::Query { code, .. } = self {
            error["code"] = serde_json::json!(code);
        }
        error
    }
}

/// One configured service, with its pool and statistics.
pub enum Service {
    Redis(redis::RedisService),
    Postgres(postgres::PgService),
}

impl Service {
    pub fn name(&self) -> &str {
        &self.stats().name
    }

    pub fn stats(&self) -> &Arc<ServiceStats> {
        match self {
            Service::Redis(s) => s.stats(),
            Service::Postgres(s) => s.stats(),
        }
    }

    /// `redis` or `postgres`.
    pub fn kind(&self) -> ServiceKind {
        match self {
            Service::Redis(_) => ServiceKind::Redis,
            Service::Postgres(_) => ServiceKind::Postgres,
        }
    }

    /// Connections in use, idle, and callers waiting for one.
    pub fn pool_status(&self) -> stats::PoolStatus {
        match self {
            Service::Redis(s) => s.pool_status(),
            Service::Postgres(s) => s.pool_status(),
        }
    }
}

/// The services of one configuration, by name. Building one is cheap:
/// pools connect lazily, on the first call, so a node starts (and a reload
/// succeeds) while a database is down, and calls fail with `unavailable`
/// until it is back.
///
/// A set belongs to the gateway built with it and is never changed: a
/// reload builds a new set beside the running one ([`Services::build`]),
/// reusing the running set's services whose configuration is unchanged (so
/// their warm connections survive), and the new set serves only if the
/// whole gateway builds and is swapped in. A rejected reload leaves the
/// running set, its pools and its metrics as they were.
#[derive(Default)]
pub struct Services {
    /// By name, with the configuration each was built from.
    /// By name: the configuration and password (from `password_file`) it
    /// was built with, and the service.
    built: HashMap<String, (ServiceConfig, Option<String>, Arc<Service>)>,
}

impl Services {
    /// No services.
    pub fn new() -> Services {
        Services::default()
    }

    /// The services of `configs`: those `previous` built with the same
    /// configuration are shared (with their connections), the others are
    /// built. `previous` is not changed. Errors name the service.
    pub fn build(
        configs: &[ServiceConfig],
        previous: &Services,
    ) -> Result<Services, (String, String)> {
        let mut built = HashMap::with_capacity(configs.len());
        for config in configs {
            let failed = |e: anyhow::Error| (config.name.clone(), format!("{e:#}"));
            // Read each time: a rotated password is a new service.
            let password = config.password().map_err(failed)?;
            let service = match previous.built.get(&config.name) {
                Some((before, same, service)) if before == config && *same == password => {
                    service.clone()
                }
                _ => Arc::new(build(config).map_err(failed)?),
            };
            built.insert(config.name.clone(), (config.clone(), password, service));
        }
        Ok(Services { built })
    }

    /// The service named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Service>> {
        self.built.get(name).map(|(_, _, service)| service)
    }

    /// Every service, by name, for metrics.
    pub fn all(&self) -> Vec<Arc<Service>> {
        let mut all: Vec<Arc<Service>> = self.built.values().map(|(_, _, s)| s.clone()).collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }
}

fn build(config: &ServiceConfig) -> anyhow::Result<Service> {
    let stats = Arc::new(ServiceStats::new(&config.name));
    Ok(match config.kind()? {
        ServiceKind::Redis => Service::Redis(redis::RedisService::new(config, stats)?),
        ServiceKind::Postgres => Service::Postgres(postgres::PgService::new(config, stats)?),
    })
}

/// The services one plugin may use. Empty by default: a plugin reaches
/// nothing it was not granted.
#[derive(Clone, Default)]
pub struct Grants {
    services: Arc<Vec<Arc<Service>>>,
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.services.iter().map(|s| s.name()))
            .finish()
    }
}

impl Grants {
    pub fn new(services: Vec<Arc<Service>>) -> Grants {
        Grants {
            services: Arc::new(services),
        }
    }

    /// Which services these are, not only their names: a service whose
    /// configuration changes is built anew while an unchanged one is
    /// shared, so equal addresses mean the same pools.
    pub fn addresses(&self) -> Vec<usize> {
        (self.services.iter())
            .map(|s| Arc::as_ptr(s) as usize)
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    pub fn names(&self) -> Vec<&str> {
        self.services.iter().map(|s| s.name()).collect()
    }

    fn find(&self, name: &str) -> Option<&Arc<Service>> {
        self.services.iter().find(|s| s.name() == name)
    }

    pub fn redis(&self, name: &str) -> Result<&redis::RedisService, ServiceError> {
        match self.find(name).map(|s| &**s) {
            Some(Service::Redis(redis)) => Ok(redis),
            Some(Service::Postgres(_)) => Err(ServiceError::NotGranted(format!(
                "service `{name}` is PostgreSQL, not Redis"
            ))),
            None => Err(self.not_granted(name)),
        }
    }

    pub fn postgres(&self, name: &str) -> Result<&postgres::PgService, ServiceError> {
        match self.find(name).map(|s| &**s) {
            Some(Service::Postgres(pg)) => Ok(pg),
            Some(Service::Redis(_)) => Err(ServiceError::NotGranted(format!(
                "service `{name}` is Redis, not PostgreSQL"
            ))),
            None => Err(self.not_granted(name)),
        }
    }

    /// The Redis service a Higress cluster name stands for (see
    /// [`redis::service_for_cluster`]).
    pub fn redis_for_cluster(&self, cluster: &str) -> Option<&redis::RedisService> {
        redis::service_for_cluster(cluster, |name| self.redis(name).ok())
    }

    fn not_granted(&self, name: &str) -> ServiceError {
        let granted = self.names();
        ServiceError::NotGranted(if granted.is_empty() {
            format!("service `{name}` is not granted to this plugin (it has none: list it in the plugin's `services`)")
        } else {
            format!(
                "service `{name}` is not granted to this plugin (granted: {})",
                granted.join(", ")
            )
        })
    }
}
