//! The admin listener: operations apart from traffic, on its own address
//! (loopback by default; a bearer token is required anywhere else).
//!
//! - `GET /healthz`, `GET /readyz`: liveness and readiness, never behind the token.
//! - `GET /metrics`: Prometheus text format (see `metrics/`).
//! - `GET /status`: reload generation and last error, plugin summaries.
//! - `GET /plugins/{name}/status`: one plugin's pools, counters and last crash.
//! - `GET|PUT|DELETE /routes/{name}`, `/upstreams/{name}`, `/plugins/{name}`,
//!   `/services/{name}` and `GET /routes`, ...: the configuration, changed
//!   like a reload (see `config_api.rs`).
//! - `POST /reload`: re-read the configuration file.
//! - `POST /profile`: a CPU profile of live traffic (see `profile.rs`).
//! - `GET /openapi.yaml`: the description of all of this.
//! - `GET /stats/history`: the last minutes of each route's traffic (see
//!   `history.rs`), for the dashboard.
//! - `GET /`, `/ui/...`: the web dashboard (see `dashboard.rs`).
//!
//! Every endpoint is listed once, in `endpoints.rs`, which the OpenAPI
//! document must match. Every request but the probes passes `guard.rs`
//! first (Host, Origin, intent: the defences against DNS rebinding and
//! cross-origin writes), then the token check.

mod config_api;
mod dashboard;
mod endpoints;
mod guard;
pub mod history;
pub mod metrics;
pub mod profile;
mod requests;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use endpoints::{Endpoint, Lookup};
use wasmgate_config::ADMIN_TOKEN_ENV;
use wasmgate_gateway::body::{self, Body, RequestBody};
use wasmgate_gateway::reload::AdminChange;
use wasmgate_gateway::LiveGateway;
use wasmgate_gateway::{Connection, Handler};

pub struct Admin {
    pub live: Arc<LiveGateway>,
    history: Arc<history::History>,
}

impl Admin {
    /// The admin API of `live`; starts sampling its routes' traffic for
    /// `/stats/history` (needs a tokio runtime).
    pub fn new(live: Arc<LiveGateway>) -> Admin {
        std::sync::LazyLock::force(&STARTED_AT_MS);
        let history = history::History::start(live.clone());
        Admin { live, history }
    }
}

/// Liveness and readiness answers (`/healthz`, `/readyz`).
fn probe(live: &LiveGateway, endpoint: Endpoint) -> Reply {
    match endpoint {
        // Why is in /status (behind the token) and the log: etcd's
        // endpoints and file paths are not for whoever reaches a probe.
        Endpoint::Readyz if !live.is_ready() => Reply::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "no configuration yet (GET /status says why)\n",
        ),
        Endpoint::Readyz if !live.is_warm() => Reply::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "a component is still compiling or a filter starting (GET /status lists it)\n",
        ),
        _ => Reply::text(StatusCode::OK, "text/plain", "ok\n"),
    }
}

/// The probes listener (`probes`): `/healthz` and `/readyz` and nothing
/// else, so orchestrators reach them where the admin API itself stays on
/// loopback (docs/admin.md, deploy/kubernetes).
pub struct Probes {
    pub live: Arc<LiveGateway>,
}

impl Handler for Probes {
    async fn handle(&self, request: Request<RequestBody>, _: Connection) -> Response<Body> {
        let reply = match endpoints::find(request.method(), request.uri().path()) {
            Lookup::Endpoint(endpoint, _) if endpoint.is_probe() => probe(&self.live, endpoint),
            _ => Reply::text(
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found: this listener answers /healthz and /readyz only\n",
            ),
        };
        Response::builder()
            .status(reply.status)
            .header(hyper::header::CONTENT_TYPE, reply.content_type)
            .header("x-content-type-options", "nosniff")
            .body(body::full(reply.body))
            .expect("static response parts are valid")
    }
}

/// The OpenAPI description, served at `/openapi.yaml` and kept in docs/.
const OPENAPI: &str = include_str!("../../../docs/admin-openapi.yaml");
/// When this process started (ms since the epoch), for `/status`'s uptime.
static STARTED_AT_MS: std::sync::LazyLock<u64> = std::sync::LazyLock::new(wasmgate_base::unix_ms);

/// Largest request body the admin API reads (a route, upstream or plugin).
const MAX_ADMIN_BODY: usize = 1 << 20;

/// An admin answer: status, content type and body.
pub(crate) struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
    /// A foreign origin allowed by `admin_origins`, echoed in CORS headers.
    cors: Option<hyper::header::HeaderValue>,
    /// Whether this answers a CORS preflight.
    preflight: bool,
}

impl Reply {
    pub(crate) fn json(status: StatusCode, value: Value) -> Reply {
        let mut text = serde_json::to_string_pretty(&value).expect("JSON values serialise");
        text.push('\n');
        Reply {
            status,
            content_type: "application/json",
            body: text.into(),
            cors: None,
            preflight: false,
        }
    }

    fn text(status: StatusCode, content_type: &'static str, text: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            content_type,
            body: text.into(),
            cors: None,
            preflight: false,
        }
    }

    pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "error": message.into() }))
    }
}

/// Who sent an admin request, for the audit log.
pub(crate) struct Caller {
    peer: std::net::SocketAddr,
    /// Whether the request carried the (configured and correct) token.
    token: bool,
}

impl Caller {
    fn change(&self, action: String) -> AdminChange {
        AdminChange::new(action, self.peer, self.token)
    }
}

impl Handler for Admin {
    async fn handle(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
    ) -> Response<Body> {
        let path = request.uri().path().to_string();
        let reply = match endpoints::find(request.method(), &path) {
            Lookup::Endpoint(endpoint, _) if endpoint.is_probe() => self.probe(endpoint),
            // The dashboard's assets: public (the page asks for the token
            // itself), but only to callers that pass the Host and Origin
            // checks, so a rebinding page cannot load them either.
            Lookup::Endpoint(Endpoint::Dashboard, _) => {
                return match self.check_caller(&request, &connection) {
                    Ok(_) => dashboard::asset(&path).expect("the table lists the assets"),
                    Err(reply) => self.respond(reply),
                };
            }
            found => self.route(request, connection, found).await,
        };
        self.respond(reply)
    }
}

impl Admin {
    fn respond(&self, reply: Reply) -> Response<Body> {
        // nosniff: a browser takes a JSON or text answer for what it says
        // it is, never for a page or a script.
        let mut response = Response::builder()
            .status(reply.status)
            .header(hyper::header::CONTENT_TYPE, reply.content_type)
            .header("x-content-type-options", "nosniff");
        if let Some(origin) = reply.cors {
            response = response
                .header("access-control-allow-origin", origin)
                .header(hyper::header::VARY, "Origin");
            if reply.preflight {
                response = response
                    .header("access-control-allow-methods", "GET, PUT, DELETE, POST")
                    .header(
                        "access-control-allow-headers",
                        "authorization, content-type, x-wasmgate-admin",
                    )
                    .header("access-control-max-age", "600");
            }
        }
        response
            .body(body::full(reply.body))
            .expect("static response parts are valid")
    }

    /// Liveness and readiness: for orchestrators that hold no token, under
    /// whatever name they use; they reveal nothing.
    fn probe(&self, endpoint: Endpoint) -> Reply {
        probe(&self.live, endpoint)
    }

    /// The Host and Origin checks (`guard.rs`): `Ok` with the CORS origin
    /// to echo, or the refusal.
    fn check_caller(
        &self,
        request: &Request<RequestBody>,
        connection: &Connection,
    ) -> Result<Option<hyper::header::HeaderValue>, Reply> {
        let gateway = self.live.current();
        let policy = guard::Policy {
            hosts: &gateway.config().admin_hosts,
            origins: &gateway.config().admin_origins,
            token_configured: expected_token(gateway.config()).is_some(),
        };
        match guard::check_caller(
            &policy,
            request.method(),
            request.headers(),
            connection.local,
        ) {
            guard::Verdict::Proceed { cors_origin } => Ok(cors_origin),
            guard::Verdict::Answer(reply) => Err(reply),
        }
    }

    async fn route(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
        found: Lookup,
    ) -> Reply {
        let cors_origin = match self.check_caller(&request, &connection) {
            Ok(cors_origin) => cors_origin,
            Err(reply) => return reply,
        };
        let gateway = self.live.current();
        let expected_token = expected_token(gateway.config());
        let policy = guard::Policy {
            hosts: &gateway.config().admin_hosts,
            origins: &gateway.config().admin_origins,
            token_configured: expected_token.is_some(),
        };
        let mut reply = self
            .authorised(request, connection, &policy, expected_token, found)
            .await;
        reply.cors = cors_origin;
        reply
    }

    /// Past the Host and Origin checks: the token, intent, then the endpoint.
    async fn authorised(
        &self,
        request: Request<RequestBody>,
        connection: Connection,
        policy: &guard::Policy<'_>,
        expected_token: Option<String>,
        found: Lookup,
    ) -> Reply {
        if let Some(expected) = &expected_token {
            if !token_matches(&request, expected) {
                return Reply::error(
                    StatusCode::UNAUTHORIZED,
                    "the admin API needs `Authorization: Bearer <admin token>`",
                );
            }
        }
        if let Some(refused) = guard::check_intent(policy, request.method(), request.headers()) {
            return refused;
        }
        let caller = Caller {
            peer: connection.peer,
            token: expected_token.is_some(),
        };
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        let (endpoint, name) = match found {
            Lookup::Endpoint(endpoint, name) => (endpoint, name),
            Lookup::WrongMethod(allowed) => {
                let allowed: Vec<String> = allowed.iter().map(Method::to_string).collect();
                return Reply::error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{path} takes {}", allowed.join(", ")),
                );
            }
            Lookup::NotFound => {
                return Reply::error(
                    StatusCode::NOT_FOUND,
                    format!("no admin endpoint {method} {path} (see GET /openapi.yaml)"),
                )
            }
        };
        let name = name.unwrap_or_default();
        match endpoint {
            Endpoint::Metrics => Reply::text(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                metrics::render(&self.live),
            ),
            Endpoint::Status => Reply::json(StatusCode::OK, self.status()),
            Endpoint::StatsHistory => Reply::json(StatusCode::OK, self.history.to_json()),
            Endpoint::Requests => requests::recent(&query),
            Endpoint::ErrorDetail => requests::error_detail(&name),
            Endpoint::OpenApi => Reply::text(StatusCode::OK, "application/yaml", OPENAPI),
            Endpoint::Reload => {
                let mut change = caller.change("POST /reload".into());
                let result = self.live.reload("admin API").await;
                change.outcome = match &result {
                    Ok(generation) => format!("applied as generation {generation}"),
                    Err(_) => "rejected".into(),
                };
                self.live.record_change(change);
                match result {
                    Ok(generation) => Reply::json(
                        StatusCode::OK,
                        json!({"reloaded": true, "generation": generation}),
                    ),
                    Err(reason) => Reply::json(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        json!({"reloaded": false, "error": reason}),
                    ),
                }
            }
            Endpoint::Profile => profile::record(&self.live, &query).await,
            Endpoint::Cluster => match self.live.store() {
                Some(store) => Reply::json(StatusCode::OK, store.cluster().await),
                None => Reply::error(
                    StatusCode::NOT_FOUND,
                    "this node is not part of a cluster: its configuration is its file (see docs/cluster.md)",
                ),
            },
            Endpoint::PluginStatus => self.plugin_status(&name),
            Endpoint::Config
            | Endpoint::List(_)
            | Endpoint::Get(_)
            | Endpoint::Put(_)
            | Endpoint::Delete(_) => {
                let body = match read_body(request).await {
                    Ok(body) => body,
                    Err(reply) => return reply,
                };
                config_api::handle(&self.live, &caller, endpoint, &name, &body).await
            }
            Endpoint::Healthz | Endpoint::Readyz | Endpoint::Dashboard => {
                unreachable!("answered before the checks")
            }
        }
    }

    fn status(&self) -> Value {
        let gateway = self.live.current();
        let plugins: Vec<Value> = gateway
            .plugin_kinds
            .iter()
            .map(|(name, kind)| {
                // A component whose new version compiles while the one
                // before serves is `updating`; one with nothing to serve
                // yet is `compiling` (build/background.rs).
                let since = gateway.compiling.iter().find(|(n, _)| n == name).map(|(_, s)| s);
                // A filter left starting (on some routes): `starting` where
                // a route has nothing to serve meanwhile, else `updating`.
                let starting: Vec<_> = (gateway.filters_starting.iter()).filter(|s| &s.plugin == name).collect();
                let state = match (since, starting.iter().any(|s| !s.previous_serves)) {
                    (_, true) => "starting",
                    (Some(_), false) => "updating",
                    (None, false) if !starting.is_empty() => "updating",
                    (None, false) => "ready",
                };
                let starting_routes: Vec<_> = starting.iter().map(|s| json!({"route": s.route, "since_ms": s.since_ms, "previous_serves": s.previous_serves})).collect();
                json!({"name": name, "kind": kind, "state": state, "compiling_since_ms": since, "starting_routes": starting_routes, "sha256": gateway.plugin_hash(name), "image": gateway.plugin_image(name)})
            })
            .chain(
                (gateway.compiling.iter())
                    .filter(|(name, _)| !gateway.plugin_kinds.iter().any(|(n, _)| n == name))
                    .map(|(name, since_ms)| {
                        json!({"name": name, "kind": "component (wasi:http)", "state": "compiling", "compiling_since_ms": since_ms})
                    }),
            )
            .collect();
        let config = match self.live.store() {
            Some(store) => store.describe(),
            None => json!({
                "file": self.live.file().display().to_string(),
                "admin_writes": gateway.config().admin_writes,
                "admin_file": gateway.config().admin_writes.then(|| self.live.admin_file().display().to_string()),
            }),
        };
        let connections = wasmgate_gateway::stats::listener_counts();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "started_at_ms": *STARTED_AT_MS,
            "reload": self.live.status(),
            // Why a node serves no configuration yet (null when it does).
            "waiting": (!self.live.is_ready()).then(|| self.live.waiting()),
            "watch": self.live.watch_status(),
            "config": config,
            "last_change": self.live.last_change(),
            "routes": gateway.config().routes.len(),
            "upstreams": gateway.config().upstreams.len(),
            "plugins": plugins,
            "listeners": gateway.config().all_listeners().iter().map(|l| {
                let counts = connections.iter().find(|c| c.address == l.address);
                json!({
                    "address": l.address,
                    "tls": l.tls.is_some(),
                    "problem": gateway.listener_problem(&l.address),
                    "open_connections": counts.map(|c| c.open_connections),
                    "max_connections": counts.map(|c| c.max_connections),
                })
            }).collect::<Vec<_>>(),
            "certificates": gateway.certificates,
        })
    }

    /// A plugin's instance sets (one per route for a filter), each with its
    /// pool, counters and last crash report.
    fn plugin_status(&self, name: &str) -> Reply {
        let gateway = self.live.current();
        let Some((_, kind)) = gateway.plugin_kinds.iter().find(|(n, _)| n == name) else {
            return Reply::error(StatusCode::NOT_FOUND, format!("no plugin `{name}`"));
        };
        let sets: Vec<Value> = gateway
            .plugin_sets()
            .into_iter()
            .filter(|set| set.name == name)
            .map(|set| {
                json!({
                    "route": set.route,
                    "pool": set.pool,
                    "stats": set.stats.snapshot(),
                    "last_crash": set.stats.last_crash(),
                })
            })
            .collect();
        Reply::json(
            StatusCode::OK,
            json!({
                "name": name,
                "kind": kind,
                "sha256": gateway.plugin_hash(name),
                "image": gateway.plugin_image(name),
                "generation": self.live.status().generation,
                "instance_sets": sets,
            }),
        )
    }
}

async fn read_body(request: Request<RequestBody>) -> Result<Bytes, Reply> {
    let limited = http_body_util::Limited::new(request.into_body(), MAX_ADMIN_BODY);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(Reply::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("reading the body: {e} (limit {MAX_ADMIN_BODY} bytes)"),
        )),
    }
}

/// The token the admin API requires, if any: the environment's, else the file's.
fn expected_token(config: &wasmgate_config::GatewayConfig) -> Option<String> {
    std::env::var(ADMIN_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| config.admin_token.clone())
}

fn token_matches(request: &Request<RequestBody>, expected: &str) -> bool {
    let given = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    constant_time_eq(given.as_bytes(), expected.as_bytes())
}

/// Compares without an early exit, so response time does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
