//! The configuration over HTTP: routes, upstreams and plugins, each listed,
//! read, put (create or replace) and deleted by name. A write is checked and
//! built exactly like a reload of the file (`LiveGateway::update`): it either
//! serves in full or is refused with every reason. In file mode writes need
//! `admin_writes: true` and are kept in the admin file beside the operator's
//! (`wasmgate_config::admin_changes`), so they survive a restart. Every write is recorded
//! (`LiveGateway::record_change`): what, before and after, from where.

use hyper::StatusCode;
use serde_json::{json, Value};

use super::endpoints::{Endpoint, Section};
use super::{Caller, Reply};
use wasmgate_config::{
    CertificateConfig, NamedEntry, PluginConfig, RouteConfig, ServiceConfig, UpstreamConfig,
};
use wasmgate_gateway::reload::{AdminChange, EditError};
use wasmgate_gateway::LiveGateway;

/// Answers `endpoint` (one of the configuration's), for entry `name` when
/// it names one.
pub(super) async fn handle(
    live: &LiveGateway,
    caller: &Caller,
    endpoint: Endpoint,
    name: &str,
    body: &[u8],
) -> Reply {
    let section = match endpoint {
        Endpoint::Config => {
            let mut config = live.current().config().clone();
            if config.admin_token.is_some() {
                config.admin_token = Some("<redacted>".into());
            }
            config.services = config.services.iter().map(NamedEntry::redacted).collect();
            config.plugins = config.plugins.iter().map(NamedEntry::redacted).collect();
            config.routes = config.routes.iter().map(NamedEntry::redacted).collect();
            for filter in &mut config.global_plugins {
                if let Some(conf) = &mut filter.conf {
                    wasmgate_config::secrets::redact_json(conf, &[]);
                }
            }
            config.certificates = config
                .certificates
                .iter()
                .map(NamedEntry::redacted)
                .collect();
            return Reply::json(StatusCode::OK, json!(config));
        }
        Endpoint::List(section)
        | Endpoint::Get(section)
        | Endpoint::Put(section)
        | Endpoint::Delete(section) => section,
        other => unreachable!("{other:?} is not a configuration endpoint"),
    };
    match section {
        Section::Routes => entry::<RouteConfig>(live, caller, endpoint, name, body).await,
        Section::Upstreams => entry::<UpstreamConfig>(live, caller, endpoint, name, body).await,
        Section::Plugins => entry::<PluginConfig>(live, caller, endpoint, name, body).await,
        Section::Services => entry::<ServiceConfig>(live, caller, endpoint, name, body).await,
        Section::Certificates => {
            entry::<CertificateConfig>(live, caller, endpoint, name, body).await
        }
    }
}

async fn entry<T: NamedEntry>(
    live: &LiveGateway,
    caller: &Caller,
    endpoint: Endpoint,
    name: &str,
    body: &[u8],
) -> Reply {
    let mut config = live.current().config().clone();
    match endpoint {
        Endpoint::List(_) => {
            let shown: Vec<T> = T::list(&mut config).iter().map(T::redacted).collect();
            Reply::json(StatusCode::OK, json!(shown))
        }
        Endpoint::Get(_) => match T::list(&mut config).iter().find(|e| e.name() == name) {
            Some(found) => Reply::json(StatusCode::OK, json!(found.redacted())),
            None => Reply::error(StatusCode::NOT_FOUND, format!("no {} `{name}`", T::KIND)),
        },
        Endpoint::Put(_) => put::<T>(live, caller, name, body).await,
        _ => {
            let name = name.to_string();
            let mut change = caller.change(format!("DELETE {} {name}", T::KIND));
            change.before = find::<T>(live, &name).map(|e| e.fingerprint());
            let result = live
                .update(&format!("admin API: DELETE {} {name}", T::KIND), |config| {
                    if !T::list(config).iter().any(|e| e.name() == name) {
                        return Err(EditError::NotFound(format!("no {} `{name}`", T::KIND)));
                    }
                    let users = wasmgate_config::names::references_to(config, T::KIND, &name);
                    if !users.is_empty() {
                        return Err(EditError::Invalid(format!(
                            "{} `{name}` is still used by {}: change or delete those first",
                            T::KIND,
                            users.join(", ")
                        )));
                    }
                    T::list(config).retain(|e| e.name() != name);
                    Ok(())
                })
                .await;
            applied(
                live,
                change,
                result,
                StatusCode::OK,
                json!({ "deleted": name }),
            )
        }
    }
}

/// The running configuration's entry named `name`.
fn find<T: NamedEntry>(live: &LiveGateway, name: &str) -> Option<T> {
    let mut config = live.current().config().clone();
    T::list(&mut config)
        .iter()
        .find(|e| e.name() == name)
        .cloned()
}

/// Creates (appended last: routes match in order) or replaces in place.
async fn put<T: NamedEntry>(live: &LiveGateway, caller: &Caller, name: &str, body: &[u8]) -> Reply {
    // A name the rule refuses is the caller's mistake, said as theirs: not
    // a reload that failed, nor an error in the operator's file (where the
    // whole configuration's check would place it).
    if let Err(why) = wasmgate_config::check_name(name) {
        let mut change = caller.change(format!("PUT {} {name}", T::KIND));
        change.before = find::<T>(live, name).map(|e| e.fingerprint());
        let reason = format!(
            "admin API: PUT {} `{}`: {why}",
            T::KIND,
            name.escape_debug()
        );
        return applied(
            live,
            change,
            Err(EditError::Invalid(reason)),
            StatusCode::UNPROCESSABLE_ENTITY,
            Value::Null,
        );
    }
    let entry: T = match parse(name, body) {
        Ok(entry) => entry,
        Err(message) => return Reply::error(StatusCode::BAD_REQUEST, message),
    };
    // What it was shown redacted and wrote back so keeps its stored value.
    let entry = match entry.with_secrets_kept(find::<T>(live, name).as_ref()) {
        Ok(entry) => entry,
        Err(message) => return Reply::error(StatusCode::BAD_REQUEST, message),
    };
    let mut change = caller.change(format!("PUT {} {name}", T::KIND));
    change.before = find::<T>(live, name).map(|e| e.fingerprint());
    change.after = Some(entry.fingerprint());
    let mut created = false;
    let result = live
        .update(&format!("admin API: PUT {} {name}", T::KIND), |config| {
            let list = T::list(config);
            match list.iter_mut().find(|e| e.name() == name) {
                Some(existing) => *existing = entry.clone(),
                None => {
                    created = true;
                    list.push(entry.clone());
                }
            }
            Ok(())
        })
        .await;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    applied(
        live,
        change,
        result,
        status,
        json!({ T::KIND: entry.redacted() }),
    )
}

/// The body as an entry named `name` (JSON or YAML; `name` may be left out).
fn parse<T: NamedEntry>(name: &str, body: &[u8]) -> Result<T, String> {
    let mut value: Value = serde_yaml_ng::from_slice(body)
        .map_err(|e| format!("the body is not JSON or YAML: {e}"))?;
    let Some(object) = value.as_object_mut() else {
        return Err(format!("a {} is an object", T::KIND));
    };
    match object.get("name").and_then(Value::as_str) {
        Some(given) if given != name => {
            return Err(format!(
                "the body names `{given}` but the path names `{name}`"
            ))
        }
        _ => {
            object.insert("name".into(), Value::String(name.to_string()));
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{}: {path}: {}", T::KIND, e.into_inner())
    })
}

/// Answers a write's outcome, and records it.
fn applied(
    live: &LiveGateway,
    mut change: AdminChange,
    result: Result<u64, EditError>,
    status: StatusCode,
    mut body: Value,
) -> Reply {
    change.outcome = match &result {
        Ok(generation) => format!("applied as generation {generation}"),
        Err(EditError::NotFound(_)) => "not found".into(),
        Err(EditError::WritesOff(_)) => "refused: admin writes are off".into(),
        Err(EditError::Invalid(_)) => "rejected".into(),
        Err(EditError::Conflict(_)) => "conflict: changed by another writer".into(),
        Err(EditError::StoreUnavailable(_)) => "failed: the store is unavailable".into(),
    };
    if let (Ok(_), Some(store)) = (&result, live.store()) {
        body["revision"] = json!(store.revision());
    }
    if result.is_err() {
        change.after = change.before.clone();
    }
    live.record_change(change);
    match result {
        Ok(generation) => {
            body["generation"] = json!(generation);
            Reply::json(status, body)
        }
        Err(EditError::NotFound(message)) => Reply::error(StatusCode::NOT_FOUND, message),
        Err(EditError::WritesOff(message)) => Reply::json(
            StatusCode::FORBIDDEN,
            json!({ "error": message, "check": "admin_writes" }),
        ),
        Err(EditError::Conflict(message)) => Reply::json(
            StatusCode::CONFLICT,
            json!({ "error": message, "check": "conflict" }),
        ),
        Err(EditError::StoreUnavailable(message)) => {
            Reply::json(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": message }))
        }
        Err(EditError::Invalid(reason)) => Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "error": "the change was rejected; the running configuration is unchanged", "reasons": reason.lines().collect::<Vec<_>>() }),
        ),
    }
}
