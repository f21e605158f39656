//! A Redis service: `pool_size` multiplexed connections (redis-rs's
//! `ConnectionManager`), commands spread over them round robin and
//! pipelined, as Envoy's Redis client does for Higress. No checkout, so no
//! wait for a free connection and no round trip to test one before use; a
//! blocking command (`BLPOP`) holds up the others on its connection, so use a
//! service of its own for those. `pool_size: 0` opens a connection per
//! command.
//!
//! A connection manager learns that its connection broke (Redis restarted,
//! a proxy dropped it) only when a command fails on it, and then reconnects.
//! So that a restart costs no command: a command that fails because its
//! connection broke is sent once more on the replacement, and the pool's
//! other connections are then tested in the background (`PING`, repeated
//! with backoff while Redis is away) and so replaced before a command meets
//! them. A command Redis received just before its connection broke may
//! thereby run twice, as with any client that retries.
//!
//! Two ways in: [`RedisService::command`] (arguments in, a parsed reply out:
//! the Extism ABI) and [`RedisService::call_resp`] (a RESP-encoded command in,
//! the RESP reply out: Higress's `proxy_redis_call`). Higress filters may
//! also choose their own credentials and database (`proxy_redis_init`):
//! each such [`Access`] gets connections of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, IntoConnectionInfo, Value};

use crate::config::{redact, ServiceConfig};
use crate::stats::{PoolStatus, ServiceStats};
use crate::ServiceError;

/// Credentials and database a Higress filter asked for with
/// `proxy_redis_init`; the default is the service URL's.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Access {
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: Option<i64>,
}

pub struct RedisService {
    info: ConnectionInfo,
    /// PEM roots for a `rediss://` server with a private CA.
    ca_pem: Option<Vec<u8>>,
    pool_size: usize,
    timeout: Duration,
    connect_timeout: Duration,
    pools: Mutex<HashMap<Access, Arc<Pool>>>,
    in_flight: Arc<AtomicUsize>,
    stats: Arc<ServiceStats>,
}

/// The connections of one [`Access`].
struct Pool {
    client: redis::Client,
    connections: Vec<ConnectionManager>,
    next: AtomicUsize,
    /// Whether a task is testing (and so replacing) broken connections.
    healing: AtomicBool,
}

/// Whether `e` means the connection broke (its manager is replacing it),
/// not that Redis refused the command.
fn broken_connection(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_unrecoverable_error()
}

impl Pool {
    /// Tests every connection until all answer, so that the broken ones are
    /// replaced before a command meets them; one task at a time per pool,
    /// ending with the pool.
    fn heal(self: &Arc<Self>, timeout: Duration) {
        if self.healing.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut backoff = wasmgate_base::backoff::Backoff::new(
                Duration::from_millis(50),
                Duration::from_secs(5),
            );
            loop {
                let Some(pool) = pool.upgrade() else { return };
                let mut all_answer = true;
                for connection in &pool.connections {
                    let mut connection = connection.clone();
                    let ping = redis::cmd("PING");
                    let answered =
                        tokio::time::timeout(timeout, connection.req_packed_command(&ping)).await;
                    all_answer &= matches!(answered, Ok(Ok(_)));
                }
                if all_answer {
                    pool.healing.store(false, Ordering::Release);
                    return;
                }
                drop(pool);
                tokio::time::sleep(backoff.next_delay()).await;
            }
        });
    }
}

impl RedisService {
    pub fn new(config: &ServiceConfig, stats: Arc<ServiceStats>) -> anyhow::Result<RedisService> {
        let url = config.redis.as_deref().unwrap_or_default();
        let mut info = url
            .into_connection_info()
            .with_context(|| format!("`{}` is not a usable Redis URL", redact(url)))?;
        if let Some(password) = config.password()? {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let ca_pem = match &config.tls_ca_file {
            Some(path) => {
                wasmgate_base::tls::read_ca_file(path)?;
                Some(std::fs::read(path)?)
            }
            None => None,
        };
        Ok(RedisService {
            info,
            ca_pem,
            pool_size: config.pool_size,
            timeout: config.timeout(),
            connect_timeout: config.connect_timeout(),
            pools: Mutex::new(HashMap::new()),
            in_flight: Arc::new(AtomicUsize::new(0)),
            stats,
        })
    }

    pub fn stats(&self) -> &Arc<ServiceStats> {
        &self.stats
    }

    /// Runs one command (its name and arguments) and returns the reply; an
    /// error reply is [`ServiceError::Redis`]. `deadline` (the guest call's
    /// time left) shortens the service's timeout.
    pub async fn command(
        &self,
        access: &Access,
        args: &[Vec<u8>],
        deadline: Option<Duration>,
    ) -> Result<Value, ServiceError> {
        match self.run(access, args, deadline).await? {
            Value::ServerError(error) => Err(ServiceError::Redis(error_text(&error))),
            value => Ok(value),
        }
    }

    /// Runs a RESP-encoded command (an array of bulk strings, as Higress's
    /// framework sends) and returns the reply RESP-encoded: what
    /// `proxy_redis_call` hands back in buffer 9. Error replies are replies
    /// here (`-ERR ...`), as Redis sent them.
    pub async fn call_resp(
        &self,
        access: &Access,
        query: &[u8],
        deadline: Option<Duration>,
    ) -> Result<Vec<u8>, ServiceError> {
        let args = command_args(query)?;
        // A refused command is answered like Redis answers one it will not
        // run: an error reply, not a failed call.
        if let Some(why) = refused(&args) {
            return Ok(format!("-ERR {why}\r\n").into_bytes());
        }
        let reply = self.run(access, &args, deadline).await?;
        let mut out = Vec::new();
        encode_resp(&reply, &mut out);
        Ok(out)
    }

    async fn run(
        &self,
        access: &Access,
        args: &[Vec<u8>],
        deadline: Option<Duration>,
    ) -> Result<Value, ServiceError> {
        let started = Instant::now();
        let result = self.send(access, args, deadline).await;
        let error = match &result {
            Ok(Value::ServerError(e)) => Some(ServiceError::Redis(error_text(e))),
            Ok(_) => None,
            Err(e) => Some(clone_error(e)),
        };
        let elapsed = started.elapsed();
        self.stats.record(elapsed, error.as_ref());
        crate::calls::note(|| crate::calls::ServiceCall {
            system: "redis",
            service: self.stats.name.clone(),
            operation: args
                .first()
                .map(|name| String::from_utf8_lossy(name).to_ascii_uppercase())
                .unwrap_or_default(),
            text: None,
            started,
            elapsed,
            error: error.map(|e| e.to_string()),
            caller: None,
        });
        result
    }

    async fn send(
        &self,
        access: &Access,
        args: &[Vec<u8>],
        deadline: Option<Duration>,
    ) -> Result<Value, ServiceError> {
        let Some((name, rest)) = args.split_first() else {
            return Err(ServiceError::BadRequest("an empty Redis command".into()));
        };
        if let Some(why) = refused(args) {
            return Err(ServiceError::BadRequest(why));
        }
        let mut cmd = redis::cmd(&String::from_utf8_lossy(name));
        for arg in rest {
            cmd.arg(&arg[..]);
        }
        let timeout = deadline.map_or(self.timeout, |d| d.min(self.timeout));
        let started = Instant::now();
        let _counted = InFlight::enter(&self.in_flight);
        let pool = self
            .pool(access)
            .map_err(|e| ServiceError::Unavailable(format!("{e:#}")))?;
        let reply = if self.pool_size == 0 {
            let connection_config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connect_timeout))
                .set_response_timeout(Some(timeout));
            let connect = pool
                .client
                .get_multiplexed_async_connection_with_config(&connection_config);
            match tokio::time::timeout(self.connect_timeout, connect).await {
                Ok(Ok(mut connection)) => {
                    self.stats.connected();
                    tokio::time::timeout(timeout, connection.req_packed_command(&cmd)).await
                }
                Ok(Err(e)) => return Err(self.failed(e)),
                Err(_) => return Err(self.timed_out("connecting", self.connect_timeout)),
            }
        } else {
            let index = pool.next.fetch_add(1, Ordering::Relaxed) % pool.connections.len();
            let mut connection = pool.connections[index].clone();
            let reply = tokio::time::timeout(timeout, connection.req_packed_command(&cmd)).await;
            match reply {
                Ok(Err(e)) if broken_connection(&e) => {
                    // Its manager is reconnecting: this waits for that
                    // connection, and the others are tested meanwhile.
                    pool.heal(self.connect_timeout);
                    let left = timeout.saturating_sub(started.elapsed());
                    tokio::time::timeout(left, connection.req_packed_command(&cmd)).await
                }
                reply => reply,
            }
        };
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(self.timed_out("the command", timeout)),
        }
    }

    fn failed(&self, e: redis::RedisError) -> ServiceError {
        let name = &self.stats.name;
        if e.is_timeout() {
            return ServiceError::Timeout(format!(
                "service `{name}`: Redis did not answer in time: {e}"
            ));
        }
        ServiceError::Unavailable(format!(
            "service `{name}`: Redis is unreachable or refused: {e}"
        ))
    }

    fn timed_out(&self, what: &str, after: Duration) -> ServiceError {
        ServiceError::Timeout(format!(
            "service `{}`: {what} took longer than {} ms",
            self.stats.name,
            after.as_millis()
        ))
    }

    /// The connections for `access`, created (lazily connecting) on first use.
    fn pool(&self, access: &Access) -> anyhow::Result<Arc<Pool>> {
        let mut pools = self.pools.lock().expect("redis pools lock");
        if let Some(pool) = pools.get(access) {
            return Ok(pool.clone());
        }
        let mut settings = self.info.redis_settings().clone();
        if let Some(username) = &access.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &access.password {
            settings = settings.set_password(password);
        }
        if let Some(db) = access.db {
            settings = settings.set_db(db);
        }
        // TCP_NODELAY: the connections are multiplexed, so a command is
        // often written while the one before it awaits its reply; with
        // Nagle's algorithm it would wait for that reply's ACK, one round
        // trip (redis-rs leaves it off by default; tokio-postgres sets it).
        let info = self
            .info
            .clone()
            .set_redis_settings(settings)
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        // The CA file applies to `rediss://` URLs; a plain one ignores it.
        let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        if tls {
            // The redis crate builds its rustls config with the process's
            // default provider, which rustls cannot pick by itself when the
            // build has two (the gateway's listeners also use aws-lc-rs):
            // ring, as every other TLS client here. A no-op once set.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = match &self.ca_pem {
            Some(pem) if tls => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            )?,
            _ => redis::Client::open(info)?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.timeout))
            // One quick retry: while the server is down, commands fail at
            // once as `unavailable` (instead of waiting out their timeout
            // in reconnect backoff), and each failure makes the manager
            // reconnect in the background, so service resumes by itself.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let connections = (0..self.pool_size)
            .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let pool = Arc::new(Pool {
            client,
            connections,
            next: AtomicUsize::new(0),
            healing: AtomicBool::new(false),
        });
        pools.insert(access.clone(), pool.clone());
        Ok(pool)
    }

    /// Connections configured (opened lazily), commands in flight. Waiting
    /// is always 0: commands never wait for a connection, they share them.
    pub fn pool_status(&self) -> PoolStatus {
        let in_use = self.in_flight.load(Ordering::Relaxed);
        let open: usize = self
            .pools
            .lock()
            .expect("redis pools lock")
            .values()
            .map(|p| p.connections.len())
            .sum();
        PoolStatus {
            max_size: self.pool_size,
            in_use,
            idle: open.saturating_sub(in_use),
            waiting: 0,
        }
    }
}

/// Why a command may not run on connections every plugin shares, if so.
/// Commands that change a connection's state (transactions, `SELECT`,
/// `AUTH`, subscriptions) would leak into other plugins' commands pipelined
/// on it, and blocking ones would hold them up; `EVAL` is the atomic way.
fn refused(args: &[Vec<u8>]) -> Option<String> {
    let name = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
    let stateful = [
        "MULTI",
        "EXEC",
        "DISCARD",
        "WATCH",
        "UNWATCH",
        "SELECT",
        "AUTH",
        "HELLO",
        "RESET",
        "QUIT",
        "SUBSCRIBE",
        "PSUBSCRIBE",
        "SSUBSCRIBE",
        "UNSUBSCRIBE",
        "PUNSUBSCRIBE",
        "SUNSUBSCRIBE",
        "MONITOR",
        "SYNC",
        "PSYNC",
        "CLIENT",
        "READONLY",
        "READWRITE",
    ];
    let blocking = [
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BLMOVE",
        "BLMPOP",
        "BZPOPMIN",
        "BZPOPMAX",
        "BZMPOP",
        "WAIT",
        "WAITAOF",
    ];
    let blocks_in_read = (name == "XREAD" || name == "XREADGROUP")
        && args[1..].iter().any(|a| a.eq_ignore_ascii_case(b"BLOCK"));
    if stateful.contains(&name.as_str()) {
        Some(format!("{name} is not allowed: connections are shared by every plugin's commands (use EVAL for atomic work; the database and credentials come from the service)"))
    } else if blocking.contains(&name.as_str()) || blocks_in_read {
        Some(format!("{name} (a blocking command) is not allowed: it would hold up the commands sharing its connection"))
    } else {
        None
    }
}

/// Counts a command in flight while alive.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::Relaxed);
        InFlight(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn clone_error(e: &ServiceError) -> ServiceError {
    match e {
        ServiceError::NotGranted(m) => ServiceError::NotGranted(m.clone()),
        ServiceError::BadRequest(m) => ServiceError::BadRequest(m.clone()),
        ServiceError::Unavailable(m) => ServiceError::Unavailable(m.clone()),
        ServiceError::Timeout(m) => ServiceError::Timeout(m.clone()),
        ServiceError::Redis(m) => ServiceError::Redis(m.clone()),
        ServiceError::Query { message, code } => ServiceError::Query {
            message: message.clone(),
            code: code.clone(),
        },
    }
}

/// `ERR unknown command ...`: the code and the details, as Redis wrote them.
fn error_text(error: &redis::ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_string(),
    }
}

/// The arguments of a RESP-encoded command: an array of bulk strings (what
/// clients send), or an inline command (words separated by spaces).
fn command_args(query: &[u8]) -> Result<Vec<Vec<u8>>, ServiceError> {
    let bad = |why: &str| ServiceError::BadRequest(format!("not a RESP command: {why}"));
    if !query.starts_with(b"*") {
        let line = query.strip_suffix(b"\r\n").unwrap_or(query);
        return Ok(line
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect());
    }
    match redis::parse_redis_value(query).map_err(|e| bad(&e.to_string()))? {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::BulkString(bytes) => Ok(bytes),
                Value::SimpleString(text) => Ok(text.into_bytes()),
                Value::Int(n) => Ok(n.to_string().into_bytes()),
                _ => Err(bad("an argument is not a string")),
            })
            .collect(),
        _ => Err(bad("not an array")),
    }
}

/// A reply in RESP2, as Redis writes it (what Higress's framework parses).
pub fn encode_resp(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.extend_from_slice(b"$-1\r\n"),
        Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Value::BulkString(bytes) => {
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Value::SimpleString(text) => out.extend_from_slice(format!("+{text}\r\n").as_bytes()),
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::ServerError(error) => {
            out.extend_from_slice(format!("-{}\r\n", error_text(error)).as_bytes())
        }
        Value::Array(items) | Value::Set(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode_resp(item, out);
            }
        }
        // RESP3-only types (the host speaks RESP2, so these do not arrive;
        // written in their RESP2 shape for completeness).
        Value::Map(pairs) => {
            out.extend_from_slice(format!("*{}\r\n", pairs.len() * 2).as_bytes());
            for (k, v) in pairs {
                encode_resp(k, out);
                encode_resp(v, out);
            }
        }
        Value::Double(d) => encode_resp(&Value::BulkString(d.to_string().into_bytes()), out),
        Value::Boolean(b) => encode_resp(&Value::Int(i64::from(*b)), out),
        Value::VerbatimString { text, .. } => {
            encode_resp(&Value::BulkString(text.clone().into_bytes()), out)
        }
        Value::Attribute { data, .. } => encode_resp(data, out),
        Value::Push { data, .. } => encode_resp(&Value::Array(data.clone()), out),
        other => encode_resp(&Value::BulkString(format!("{other:?}").into_bytes()), out),
    }
}

/// A reply as the Extism ABI gives it (docs/services.md).
pub fn reply_to_json(value: &Value) -> serde_json::Value {
    use base64::Engine;
    use serde_json::json;
    match value {
        Value::Nil => serde_json::Value::Null,
        Value::Int(n) => json!(n),
        Value::BulkString(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => json!(text),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(bytes) }),
        },
        Value::SimpleString(text) => json!(text),
        Value::Okay => json!("OK"),
        Value::ServerError(error) => json!({ "error": error_text(error) }),
        Value::Array(items) | Value::Set(items) => {
            serde_json::Value::Array(items.iter().map(reply_to_json).collect())
        }
        Value::Map(pairs) => serde_json::Value::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [reply_to_json(k), reply_to_json(v)])
                .collect(),
        ),
        Value::Double(d) => json!(d),
        Value::Boolean(b) => json!(b),
        Value::VerbatimString { text, .. } => json!(text),
        Value::Attribute { data, .. } => reply_to_json(data),
        Value::Push { data, .. } => {
            serde_json::Value::Array(data.iter().map(reply_to_json).collect())
        }
        other => json!(format!("{other:?}")),
    }
}

/// The Redis service a Higress cluster name stands for, through `lookup`
/// (a service by name). Higress's framework builds names such as
/// `outbound|6379||redis.static`, `outbound|6379||redis.dns` or
/// `outbound|6379||redis.default.svc.cluster.local` from a plugin's
/// `service_name` and `service_port`, and may append `?db=N`. Tried in turn:
/// the whole name (without `?...`), the FQDN part, and the FQDN's first
/// label. So `service_name: redis.static` (or `redis`, `redis.dns`, ...)
/// reaches the service named `redis`; the port is not used (the service's
/// URL has the address).
pub fn service_for_cluster<'a, T>(
    cluster: &str,
    lookup: impl Fn(&str) -> Option<&'a T>,
) -> Option<&'a T> {
    let cluster = cluster.split('?').next().unwrap_or(cluster);
    if let Some(found) = lookup(cluster) {
        return Some(found);
    }
    let fqdn = match cluster.split('|').collect::<Vec<_>>().as_slice() {
        [_, _, _, fqdn] => *fqdn,
        _ => cluster,
    };
    lookup(fqdn).or_else(|| lookup(fqdn.split('.').next().unwrap_or(fqdn)))
}

/// The database a Higress cluster string asks for (`...?db=2`).
pub fn db_of_cluster(cluster: &str) -> Option<i64> {
    let (_, query) = cluster.split_once('?')?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("db="))
        .and_then(|db| db.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_commands_are_parsed_and_replies_written_as_redis_writes_them() {
        let args = command_args(b"*2\r\n$4\r\nincr\r\n$1\r\nk\r\n").unwrap();
        assert_eq!(args, [b"incr".to_vec(), b"k".to_vec()]);
        assert_eq!(command_args(b"PING\r\n").unwrap(), [b"PING".to_vec()]);
        assert!(command_args(b"*1\r\n*0\r\n").is_err());
        let reply = Value::Array(vec![
            Value::Int(3),
            Value::Nil,
            Value::BulkString(b"a\r\nb".to_vec()),
            Value::Okay,
        ]);
        let mut out = Vec::new();
        encode_resp(&reply, &mut out);
        assert_eq!(out, b"*4\r\n:3\r\n$-1\r\n$4\r\na\r\nb\r\n+OK\r\n");
        assert_eq!(redis::parse_redis_value(&out).unwrap(), reply);
        assert_eq!(
            reply_to_json(&reply),
            serde_json::json!([3, null, "a\r\nb", "OK"])
        );
        assert_eq!(
            reply_to_json(&Value::BulkString(vec![0xff])),
            serde_json::json!({"base64": "/w=="})
        );
    }

    #[test]
    fn higress_cluster_names_map_onto_services() {
        let services = ["redis", "cache.dns"];
        let lookup = |name: &str| services.iter().find(|s| **s == name);
        for (cluster, expected) in [
            ("redis", Some("redis")),
            ("outbound|6379||redis.static", Some("redis")),
            ("outbound|6379||redis.dns?db=2", Some("redis")),
            (
                "outbound|6379||redis.default.svc.cluster.local",
                Some("redis"),
            ),
            ("outbound|6379||cache.dns", Some("cache.dns")),
            ("outbound|6379||other.static", None),
        ] {
            assert_eq!(
                service_for_cluster(cluster, lookup).copied(),
                expected,
                "{cluster}"
            );
        }
        assert_eq!(db_of_cluster("outbound|6379||redis.dns?db=2"), Some(2));
        assert_eq!(db_of_cluster("redis"), None);
    }

    #[test]
    fn commands_that_would_leak_into_shared_connections_are_refused() {
        let args = |words: &[&str]| {
            words
                .iter()
                .map(|w| w.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        for refused_command in [
            &["multi"][..],
            &["SELECT", "2"],
            &["blpop", "q", "0"],
            &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        ] {
            assert!(
                refused(&args(refused_command)).is_some(),
                "{refused_command:?}"
            );
        }
        for allowed in [
            &["EVAL", "return 1", "0"][..],
            &["XREAD", "STREAMS", "s", "0"],
            &["GET", "k"],
        ] {
            assert!(refused(&args(allowed)).is_none(), "{allowed:?}");
        }
    }
}
