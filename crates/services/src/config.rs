//! A service as the operator writes it: `services[]` in the gateway
//! configuration, or `--service NAME=URL` on `serve`.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A database plugins may reach by name: exactly one of `redis` or `postgres`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// The name plugins use (and grants list): 1-64 letters, digits, `.`,
    /// `_` and `-`, beginning with a letter or digit.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub name: String,
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// `postgres://user[:password]@host[:port]/database[?sslmode=require]`
    /// (`sslmode=require` or `verify-full` for TLS; `disable` and `prefer`
    /// connect without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<String>,
    /// Most connections open at once on this node; 0 opens a connection per
    /// call and closes it after (no pooling).
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Deadline of one command or query (default 1000 ms for Redis, 5000 ms
    /// for PostgreSQL). The plugin's own deadline still applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Deadline for opening a connection (TCP, TLS and authentication).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long a call waits for a pooled connection to come free (default:
    /// `timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout_timeout_ms: Option<u64>,
    /// A PEM file of CA certificates to trust for TLS (a private CA, a
    /// self-signed server); without it the Mozilla roots (webpki-roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// The password, read from this file instead of the URL (a Kubernetes
    /// Secret key mounted as a file, a Docker secret); one trailing newline
    /// is dropped. Read whenever the node builds its configuration, so a
    /// rotated password is used after the next reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Whether this entry is the operator's own (its configuration file or
    /// a command-line flag), not the admin API's or etcd's: only such
    /// entries may name a `password_file`, whose content goes to the
    /// service's host (from a writer of the admin API, that would send any
    /// file the node can read to any server). Never read or written.
    #[serde(skip)]
    #[schemars(skip)]
    pub from_operator: bool,
}

fn default_pool_size() -> usize {
    16
}

fn default_connect_timeout_ms() -> u64 {
    3000
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceKind {
    Redis,
    Postgres,
}

impl ServiceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Redis => "redis",
            ServiceKind::Postgres => "postgres",
        }
    }
}

impl ServiceConfig {
    /// A service from `NAME=URL` (the `--service` flag): the URL's scheme
    /// says which kind.
    pub fn from_flag(flag: &str) -> Result<ServiceConfig, String> {
        let (name, url) = flag
            .split_once('=')
            .ok_or_else(|| format!("--service {flag:?}: expected NAME=URL"))?;
        let mut config = ServiceConfig {
            name: name.to_string(),
            redis: None,
            postgres: None,
            pool_size: default_pool_size(),
            timeout_ms: None,
            connect_timeout_ms: default_connect_timeout_ms(),
            checkout_timeout_ms: None,
            tls_ca_file: None,
            password_file: None,
            from_operator: true,
        };
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("redis" | "rediss") => config.redis = Some(url.to_string()),
            Some("postgres" | "postgresql") => config.postgres = Some(url.to_string()),
            _ => {
                return Err(format!(
                    "--service {name}: `{url}` is neither a redis:// nor a postgres:// URL"
                ))
            }
        }
        Ok(config)
    }

    pub fn kind(&self) -> anyhow::Result<ServiceKind> {
        match (&self.redis, &self.postgres) {
            (Some(_), None) => Ok(ServiceKind::Redis),
            (None, Some(_)) => Ok(ServiceKind::Postgres),
            _ => anyhow::bail!("give exactly one of `redis` or `postgres` (a URL)"),
        }
    }

    pub fn timeout(&self) -> Duration {
        let default = match self.redis {
            Some(_) => 1000,
            None => 5000,
        };
        Duration::from_millis(self.timeout_ms.unwrap_or(default).max(1))
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.max(1))
    }

    pub fn checkout_timeout(&self) -> Duration {
        self.checkout_timeout_ms
            .map_or_else(|| self.timeout(), Duration::from_millis)
    }

    /// The checks serde cannot do, as (field, message) pairs relative to
    /// this entry.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Err(e) = self.kind() {
            problems.push(("", e.to_string()));
        }
        if let Some(url) = &self.redis {
            if let Err(e) = ::redis::parse_redis_url(url)
                .ok_or("not a redis:// or rediss:// URL")
                .and_then(|u| {
                    ::redis::IntoConnectionInfo::into_connection_info(u)
                        .map_err(|_| "not a usable Redis URL")
                })
            {
                problems.push(("redis", format!("`{}`: {e}", redact(url))));
            }
        }
        if let Some(url) = &self.postgres {
            if let Err(e) = crate::postgres::parse_url(url) {
                problems.push(("postgres", format!("`{}`: {e}", redact(url))));
            }
        }
        if let Some(path) = &self.tls_ca_file {
            if let Err(e) = wasmgate_base::tls::read_ca_file(path) {
                problems.push(("tls_ca_file", format!("{e:#}")));
            }
        }
        if let Err(e) = self.password() {
            problems.push(("password_file", format!("{e:#}")));
        }
        problems
    }

    /// This entry with its `password_file`'s password written into its URL
    /// instead, for `wasmgate config push`: the nodes read only their own
    /// files, so a pushed service carries its password as a URL written
    /// through the admin API does.
    pub fn with_password_inlined(&self) -> anyhow::Result<ServiceConfig> {
        match self.password()? {
            Some(password) => self.with_password(&password),
            None => Ok(self.clone()),
        }
    }

    /// This entry with `password` written into its URL (and no
    /// `password_file`): a password from a file or a Kubernetes Secret.
    pub fn with_password(&self, password: &str) -> anyhow::Result<ServiceConfig> {
        let mut inlined = self.clone();
        for url in [&mut inlined.redis, &mut inlined.postgres]
            .into_iter()
            .flatten()
        {
            let mut parsed =
                url::Url::parse(url).map_err(|e| anyhow::anyhow!("`{}`: {e}", redact(url)))?;
            parsed
                .set_password(Some(password))
                .map_err(|()| anyhow::anyhow!("`{}` cannot carry a password", redact(url)))?;
            *url = parsed.to_string();
        }
        inlined.password_file = None;
        Ok(inlined)
    }

    /// The password of `password_file`, if the service has one.
    pub fn password(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.password_file else {
            return Ok(None);
        };
        anyhow::ensure!(
            self.from_operator,
            "password_file is read only for services of the node's own configuration file: one written through the admin API or etcd would send a file of the node to the host its URL names; put the password in the URL there"
        );
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let password = text.strip_suffix('\n').unwrap_or(&text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        anyhow::ensure!(!password.is_empty(), "{} is empty", path.display());
        Ok(Some(password.to_string()))
    }
}

/// A URL with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_checks() {
        let redis = ServiceConfig::from_flag("cache=redis://127.0.0.1:6379/2").unwrap();
        assert_eq!(redis.kind().unwrap(), ServiceKind::Redis);
        assert_eq!(redis.timeout(), Duration::from_millis(1000));
        assert!(redis.check().is_empty(), "{:?}", redis.check());
        let pg = ServiceConfig::from_flag("orders=postgres://app:pw@127.0.0.1/shop").unwrap();
        assert_eq!(pg.kind().unwrap(), ServiceKind::Postgres);
        assert_eq!(pg.checkout_timeout(), Duration::from_millis(5000));
        assert!(pg.check().is_empty(), "{:?}", pg.check());
        assert!(ServiceConfig::from_flag("x=mysql://h/db").is_err());
        assert!(ServiceConfig::from_flag("nothing").is_err());
        let mut both = pg.clone();
        both.redis = Some("redis://h".into());
        assert_eq!(both.check()[0].0, "");
        let mut bad = pg;
        bad.postgres = Some("postgres://app@127.0.0.1/shop?sslmode=sometimes".into());
        assert_eq!(bad.check()[0].0, "postgres", "{:?}", bad.check());
        assert_eq!(
            redact("postgres://app:secret@h/db"),
            "postgres://app:***@h/db"
        );
    }

    /// `config push` publishes a password file's password in the URL
    /// (percent-encoded); a service that is not the operator's may not
    /// name a file at all.
    #[test]
    fn password_files_are_inlined_for_push_and_refused_from_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "p@ss word\n").unwrap();
        let mut redis = ServiceConfig::from_flag("cache=redis://127.0.0.1:6379/0").unwrap();
        redis.password_file = Some(file.clone());
        let inlined = redis.with_password_inlined().unwrap();
        assert_eq!(
            inlined.redis.as_deref(),
            Some("redis://:p%40ss%20word@127.0.0.1:6379/0")
        );
        assert_eq!(inlined.password_file, None);
        let mut pg = ServiceConfig::from_flag("db=postgres://app@127.0.0.1/app").unwrap();
        pg.password_file = Some(file);
        let inlined = pg.with_password_inlined().unwrap();
        assert_eq!(
            inlined.postgres.as_deref(),
            Some("postgres://app:p%40ss%20word@127.0.0.1/app")
        );
        redis.from_operator = false;
        let refused = redis.password().unwrap_err().to_string();
        assert!(
            refused.contains("read only for services of the node's own"),
            "{refused}"
        );
    }
}
