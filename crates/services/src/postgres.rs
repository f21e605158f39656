//! A PostgreSQL service: a bounded pool of connections (deadpool-postgres
//! over tokio-postgres), prepared statements cached per connection, and
//! rows as JSON (`pg_values.rs`). Connections are checked out per query and
//! checked without a round trip on return (`RecyclingMethod::Fast`: a
//! broken connection is noticed, not probed). `pool_size: 0` opens a
//! connection per query and closes it after (what a plugin that connects by
//! itself would cost; the benchmark's "no pooling" case).
//!
//! Timeouts: `connect_timeout_ms` for opening a connection (TCP, TLS and
//! authentication), `checkout_timeout_ms` for waiting for a free one,
//! `timeout_ms` for the statement. A statement that times out is cancelled
//! on the server and its connection dropped, so nothing half-done goes back
//! to the pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use serde_json::{json, Value};
use tokio_postgres::config::SslMode;
use tokio_postgres::{NoTls, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{redact, ServiceConfig};
use crate::pg_values::{supported, PgValue};
use crate::stats::{PoolStatus, ServiceStats};
use crate::ServiceError;

pub struct PgService {
    config: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
    /// None with `pool_size: 0`.
    pool: Option<Pool>,
    timeout: Duration,
    stats: Arc<ServiceStats>,
}

/// What a query returned: its columns (name and type) and rows.
#[derive(Debug)]
pub struct QueryResult {
    pub columns: Vec<(String, String)>,
    pub rows: Vec<Vec<Value>>,
}

impl QueryResult {
    /// As the Extism ABI gives it: `{"columns": [...], "rows": [...]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "columns": self.columns.iter().map(|(name, ty)| json!({"name": name, "type": ty})).collect::<Vec<_>>(),
            "rows": self.rows,
        })
    }
}

/// Parses a `postgres://` URL into tokio-postgres's configuration, and
/// where it asks for TLS, the CA file it names (`sslrootcert`). TLS always
/// verifies the server's certificate (libpq's `verify-full`), so
/// `verify-ca` and `verify-full` mean `require`.
pub(crate) fn parse_url(url: &str) -> anyhow::Result<(tokio_postgres::Config, Option<String>)> {
    let mut parsed = url::Url::parse(url)?;
    let mut ca_file = None;
    let pairs: Vec<(String, String)> = parsed
        .query_pairs()
        .filter_map(|(key, value)| match key.as_ref() {
            "sslrootcert" => {
                ca_file = Some(value.into_owned());
                None
            }
            "sslmode" if value == "verify-full" || value == "verify-ca" => {
                Some((key.into_owned(), "require".to_string()))
            }
            _ => Some((key.into_owned(), value.into_owned())),
        })
        .collect();
    if pairs.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    let config: tokio_postgres::Config = parsed.as_str().parse()?;
    Ok((config, ca_file))
}

impl PgService {
    pub fn new(service: &ServiceConfig, stats: Arc<ServiceStats>) -> anyhow::Result<PgService> {
        let url = service.postgres.as_deref().unwrap_or_default();
        let (mut config, url_ca_file) =
            parse_url(url).map_err(|e| anyhow::anyhow!("`{}`: {e}", redact(url)))?;
        config.connect_timeout(service.connect_timeout());
        if let Some(password) = service.password()? {
            config.password(password);
        }
        let tls = match config.get_ssl_mode() {
            SslMode::Require => {
                let ca_file = service.tls_ca_file.clone().or(url_ca_file.map(Into::into));
                let client = wasmgate_base::tls::client_config(ca_file.as_deref())?;
                Some(MakeRustlsConnect::new((*client).clone()))
            }
            // `prefer` (libpq's default) connects without TLS: TLS that a
            // server may silently refuse protects nothing.
            _ => {
                config.ssl_mode(SslMode::Disable);
                None
            }
        };
        let pool = match service.pool_size {
            0 => None,
            size => {
                let manager_config = ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                };
                let manager = match &tls {
                    Some(tls) => Manager::from_config(config.clone(), tls.clone(), manager_config),
                    None => Manager::from_config(config.clone(), NoTls, manager_config),
                };
                let counted = stats.clone();
                Some(
                    Pool::builder(manager)
                        .post_create(deadpool_postgres::Hook::sync_fn(move |_, _| {
                            counted.connected();
                            Ok(())
                        }))
                        .max_size(size)
                        .wait_timeout(Some(service.checkout_timeout()))
                        .create_timeout(Some(service.connect_timeout()))
                        .recycle_timeout(Some(service.connect_timeout()))
                        .runtime(Runtime::Tokio1)
                        .build()?,
                )
            }
        };
        Ok(PgService {
            config,
            tls,
            pool,
            timeout: service.timeout(),
            stats,
        })
    }

    pub fn stats(&self) -> &Arc<ServiceStats> {
        &self.stats
    }

    pub fn pool_status(&self) -> PoolStatus {
        match &self.pool {
            Some(pool) => {
                let status = pool.status();
                PoolStatus {
                    max_size: status.max_size,
                    in_use: status.size.saturating_sub(status.available),
                    idle: status.available,
                    waiting: status.waiting,
                }
            }
            None => PoolStatus::default(),
        }
    }

    /// Runs `sql` with `params` ($1, $2, ...) and returns its rows.
    pub async fn query(
        &self,
        sql: &str,
        params: &[Value],
        deadline: Option<Duration>,
    ) -> Result<QueryResult, ServiceError> {
        let started = Instant::now();
        let result = self.run(sql, params, deadline, Op::Query).await;
        self.counted(sql, started, result.as_ref().err());
        result.map(|done| match done {
            Done::Rows(rows) => rows,
            Done::Count(_) => unreachable!("a query returns rows"),
        })
    }

    /// Runs `sql` and returns how many rows it changed.
    pub async fn execute(
        &self,
        sql: &str,
        params: &[Value],
        deadline: Option<Duration>,
    ) -> Result<u64, ServiceError> {
        let started = Instant::now();
        let result = self.run(sql, params, deadline, Op::Execute).await;
        self.counted(sql, started, result.as_ref().err());
        result.map(|done| match done {
            Done::Count(n) => n,
            Done::Rows(_) => unreachable!("execute returns a count"),
        })
    }

    /// A statement's call in the service's stats and the request's trace.
    fn counted(&self, sql: &str, started: Instant, error: Option<&ServiceError>) {
        let elapsed = started.elapsed();
        self.stats.record(elapsed, error);
        crate::calls::note(|| crate::calls::ServiceCall {
            system: "postgresql",
            service: self.stats.name.clone(),
            operation: crate::calls::operation_of(sql),
            text: Some(crate::calls::text_of(sql)),
            started,
            elapsed,
            error: error.map(ToString::to_string),
            caller: None,
        });
    }

    async fn run(
        &self,
        sql: &str,
        params: &[Value],
        deadline: Option<Duration>,
        op: Op,
    ) -> Result<Done, ServiceError> {
        let timeout = deadline.map_or(self.timeout, |d| d.min(self.timeout));
        let params: Vec<PgValue> = params
            .iter()
            .enumerate()
            .map(|(i, value)| PgValue {
                value: value.clone(),
                index: i + 1,
            })
            .collect();
        match &self.pool {
            Some(pool) => {
                let client = pool.get().await.map_err(|e| self.checkout_failed(e))?;
                // deadpool's wrapper caches prepared statements per connection.
                let prepared = self
                    .bounded(&client, timeout, client.prepare_cached(sql))
                    .await;
                let outcome = match prepared {
                    Ok(statement) => match check_statement(&statement, &params) {
                        Ok(()) => {
                            let run = run_statement(&client, &statement, &params, op);
                            self.bounded(&client, timeout, run).await
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                // A connection whose statement timed out or broke is not
                // given back; the pool opens another when needed.
                if matches!(
                    outcome,
                    Err(ServiceError::Timeout(_) | ServiceError::Unavailable(_))
                ) || client.is_closed()
                {
                    let _ = deadpool_postgres::Object::take(client);
                }
                outcome
            }
            None => {
                let client = self.connect().await?;
                let statement = self.bounded(&client, timeout, client.prepare(sql)).await?;
                check_statement(&statement, &params)?;
                let run = run_statement(&client, &statement, &params, op);
                self.bounded(&client, timeout, run).await
            }
        }
    }

    /// `work` on `client`, within `timeout` (then cancelled on the server).
    async fn bounded<T>(
        &self,
        client: &tokio_postgres::Client,
        timeout: Duration,
        work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, ServiceError> {
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result.map_err(|e| self.failed(e)),
            Err(_) => Err(self.timed_out(client, timeout)),
        }
    }

    /// A fresh connection, for `pool_size: 0`; closed when dropped.
    async fn connect(&self) -> Result<tokio_postgres::Client, ServiceError> {
        let connected = match &self.tls {
            Some(tls) => self
                .config
                .connect(tls.clone())
                .await
                .map(|(client, connection)| {
                    tokio::spawn(connection);
                    client
                }),
            None => self
                .config
                .connect(NoTls)
                .await
                .map(|(client, connection)| {
                    tokio::spawn(connection);
                    client
                }),
        };
        let client = connected.map_err(|e| self.failed(e))?;
        self.stats.connected();
        Ok(client)
    }

    fn checkout_failed(&self, e: PoolError) -> ServiceError {
        let name = &self.stats.name;
        match e {
            PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => {
                ServiceError::Unavailable(format!(
                    "service `{name}`: no pooled connection came free in time (all {} in use)",
                    self.pool_status().max_size
                ))
            }
            PoolError::Timeout(_) => ServiceError::Unavailable(format!(
                "service `{name}`: connecting to PostgreSQL took too long"
            )),
            PoolError::Backend(e) => self.failed(e),
            other => ServiceError::Unavailable(format!("service `{name}`: {other}")),
        }
    }

    /// Maps a driver error: the server's refusal of a statement is `query`
    /// (with its SQLSTATE); failures to reach or stay connected, including
    /// refused credentials and a server shutting down, are `unavailable`.
    fn failed(&self, e: tokio_postgres::Error) -> ServiceError {
        let name = &self.stats.name;
        if let Some(db) = e.as_db_error() {
            let code = db.code().code().to_string();
            // 08: connection exception, 28: invalid authorization,
            // 57P: the server is shutting down or restarting, 53: out of resources.
            if code.starts_with("08")
                || code.starts_with("28")
                || code.starts_with("57P")
                || code.starts_with("53")
            {
                return ServiceError::Unavailable(format!(
                    "service `{name}`: PostgreSQL refused the connection: {} ({code})",
                    db.message()
                ));
            }
            let mut message = db.message().to_string();
            if let Some(detail) = db.detail() {
                message.push_str(": ");
                message.push_str(detail);
            }
            return ServiceError::Query { message, code };
        }
        // Parameter conversion errors carry our message as their source.
        if let Some(source) = std::error::Error::source(&e) {
            if source.to_string().starts_with("parameter $") {
                return ServiceError::BadRequest(source.to_string());
            }
        }
        ServiceError::Unavailable(format!(
            "service `{name}`: PostgreSQL is unreachable: {}",
            full(&e)
        ))
    }

    /// Cancels the running statement on the server (in the background) and
    /// reports the timeout.
    fn timed_out(&self, client: &tokio_postgres::Client, after: Duration) -> ServiceError {
        let token = client.cancel_token();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            let _ = match tls {
                Some(tls) => token.cancel_query(tls).await,
                None => token.cancel_query(NoTls).await,
            };
        });
        ServiceError::Timeout(format!(
            "service `{}`: the statement took longer than {} ms (cancelled)",
            self.stats.name,
            after.as_millis()
        ))
    }
}

/// The statement can run with these parameters, and its columns convert.
fn check_statement(statement: &Statement, params: &[PgValue]) -> Result<(), ServiceError> {
    if statement.params().len() != params.len() {
        return Err(ServiceError::BadRequest(format!(
            "the statement takes {} parameters, {} were given",
            statement.params().len(),
            params.len()
        )));
    }
    if let Some(column) = statement.columns().iter().find(|c| !supported(c.type_())) {
        return Err(ServiceError::BadRequest(format!(
            "column `{}` has type {}, which wasmgate does not convert: cast it in SQL (`{}::text`)",
            column.name(),
            column.type_().name(),
            column.name()
        )));
    }
    if let Some((i, ty)) = statement
        .params()
        .iter()
        .enumerate()
        .find(|(_, ty)| !supported(ty))
    {
        return Err(ServiceError::BadRequest(format!(
            "parameter ${} has type {}, which wasmgate does not convert: cast it in SQL (`${}::text`)",
            i + 1,
            ty.name(),
            i + 1
        )));
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Op {
    Query,
    Execute,
}

enum Done {
    Rows(QueryResult),
    Count(u64),
}

async fn run_statement(
    client: &tokio_postgres::Client,
    statement: &Statement,
    params: &[PgValue],
    op: Op,
) -> Result<Done, tokio_postgres::Error> {
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        params.iter().map(|p| p as _).collect();
    match op {
        Op::Execute => client.execute(statement, &refs).await.map(Done::Count),
        Op::Query => {
            let rows = client.query(statement, &refs).await?;
            let columns = statement
                .columns()
                .iter()
                .map(|c| (c.name().to_string(), c.type_().name().to_string()))
                .collect();
            let rows = rows
                .iter()
                .map(|row| {
                    (0..row.len())
                        .map(|i| row.try_get::<_, PgValue>(i).map(|v| v.value))
                        .collect::<Result<Vec<_>, _>>()
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Done::Rows(QueryResult { columns, rows }))
        }
    }
}

/// An error with its causes, for messages.
fn full(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
