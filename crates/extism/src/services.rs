//! `wasmgate:host/services`: Redis and PostgreSQL for Extism plugins, through
//! the host's pools (the `wasmgate-services` crate). Each function takes a
//! handle to a JSON request and returns a handle to a JSON answer, both the
//! guest's to free (the calling convention of `extism:host/user`); a failed
//! operation is an answer with `error` (`{"kind", "message", "code"?}`), not
//! a trap. The call's fiber waits for the database, not a thread, and the
//! call's deadline bounds the operation. The contract, with the type mapping,
//! is docs/services.md; the guest libraries in `guest/` wrap it.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use wasmgate_services::redis::{reply_to_json, Access};
use wasmgate_services::{Grants, ServiceError};
use wasmtime::{AsContextMut, Caller, Linker};

use crate::kernel;
use crate::state::ExtismState;

pub const MODULE: &str = "wasmgate:host/services";

/// The functions this module provides.
pub const FUNCTIONS: &[&str] = &["redis", "pg_query", "pg_execute"];

type Ctx<'a> = Caller<'a, ExtismState>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedisRequest {
    service: String,
    command: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlRequest {
    service: String,
    sql: String,
    #[serde(default)]
    params: Vec<Value>,
}

#[derive(Clone, Copy)]
enum Sql {
    Query,
    Execute,
}

pub fn add_to_linker(linker: &mut Linker<ExtismState>) -> wasmtime::Result<()> {
    linker.func_wrap_async(MODULE, "redis", |mut c: Ctx, (request,): (u64,)| {
        Box::new(async move {
            let (grants, deadline) = (
                c.data().plugin.services.clone(),
                c.data().budget.remaining(),
            );
            let answer = match parse::<RedisRequest>(&mut c, request, "redis request") {
                Ok(request) => waiting(&mut c, redis(&grants, deadline, request)).await,
                Err(e) => Err(e),
            };
            answer_with(&mut c, answer.map(|reply| json!({ "reply": reply })))
        })
    })?;
    for (name, op) in [("pg_query", Sql::Query), ("pg_execute", Sql::Execute)] {
        linker.func_wrap_async(MODULE, name, move |mut c: Ctx, (request,): (u64,)| {
            Box::new(async move {
                let (grants, deadline) = (
                    c.data().plugin.services.clone(),
                    c.data().budget.remaining(),
                );
                let answer = match parse::<SqlRequest>(&mut c, request, "SQL request") {
                    Ok(request) => waiting(&mut c, sql(&grants, deadline, request, op)).await,
                    Err(e) => Err(e),
                };
                answer_with(&mut c, answer)
            })
        })?;
    }
    Ok(())
}

/// Awaits `future`, a wait on the network, and tells the call's budget how
/// long it took, so that waiting does not make the call a long one.
pub(crate) async fn waiting<F: std::future::Future>(c: &mut Ctx<'_>, future: F) -> F::Output {
    let started = std::time::Instant::now();
    let output = future.await;
    c.data_mut().budget.add_wait(started.elapsed());
    output
}

/// The JSON request at `handle`; a missing handle traps (as in
/// `extism:host/env`), malformed JSON is a `bad_request` answer.
fn parse<T: serde::de::DeserializeOwned>(
    c: &mut Ctx<'_>,
    handle: u64,
    what: &str,
) -> Result<T, ServiceError> {
    // The guest keeps its request (as with `extism:host/user` functions,
    // whose arguments extism-pdk's `#[host_fn]` frees after the call).
    let Some(bytes) = kernel::read_block(&mut c.as_context_mut(), handle) else {
        return Err(ServiceError::BadRequest(format!(
            "invalid handle offset for the {what}: {handle}"
        )));
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| ServiceError::BadRequest(format!("invalid {what} JSON: {e}")))
}

async fn redis(
    grants: &Grants,
    deadline: Option<Duration>,
    request: RedisRequest,
) -> Result<Value, ServiceError> {
    let service = grants.redis(&request.service)?;
    let args = request
        .command
        .iter()
        .map(redis_arg)
        .collect::<Result<Vec<_>, _>>()?;
    let reply = service.command(&Access::default(), &args, deadline).await?;
    Ok(reply_to_json(&reply))
}

/// A command argument: a string, a number, or `{"base64": ...}`.
fn redis_arg(value: &Value) -> Result<Vec<u8>, ServiceError> {
    use base64::Engine;
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Number(n) => Ok(n.to_string().into_bytes()),
        Value::Object(o) => match o.get("base64").and_then(Value::as_str) {
            Some(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| ServiceError::BadRequest(format!("invalid base64 argument: {e}"))),
            None => Err(ServiceError::BadRequest(format!(
                "a Redis argument is a string, a number or {{\"base64\": ...}}, not {value}"
            ))),
        },
        other => Err(ServiceError::BadRequest(format!(
            "a Redis argument is a string, a number or {{\"base64\": ...}}, not {other}"
        ))),
    }
}

async fn sql(
    grants: &Grants,
    deadline: Option<Duration>,
    request: SqlRequest,
    op: Sql,
) -> Result<Value, ServiceError> {
    let service = grants.postgres(&request.service)?;
    match op {
        Sql::Query => Ok(service
            .query(&request.sql, &request.params, deadline)
            .await?
            .to_json()),
        Sql::Execute => {
            let rows = service
                .execute(&request.sql, &request.params, deadline)
                .await?;
            Ok(json!({ "rows_affected": rows }))
        }
    }
}

/// Writes the answer (or `{"error": ...}`) into a new block for the guest.
fn answer_with(c: &mut Ctx<'_>, answer: Result<Value, ServiceError>) -> wasmtime::Result<u64> {
    let answer = answer.unwrap_or_else(|e| json!({ "error": e.to_json() }));
    let bytes = serde_json::to_vec(&answer).expect("JSON values serialise");
    match kernel::alloc_bytes(&mut c.as_context_mut(), &bytes) {
        0 => wasmtime::bail!("{} unable to allocate memory", c.data().plugin.name),
        handle => Ok(handle),
    }
}
