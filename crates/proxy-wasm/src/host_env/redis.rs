//! Higress's Redis extension (ABI 0.2.100): `proxy_redis_init` and
//! `proxy_redis_call`, answered in `proxy_on_redis_call_response` (see
//! `redis_call.rs`).

use wasmtime::Linker;

use super::{too_many_calls, Ctx, Result, BAD_ARGUMENT, MODULE, OK};
use crate::callout::Callout;
use crate::redis_call::{base_cluster, RedisCallRequest, RedisInit};
use crate::state::{read, write_u32, FilterState};

/// Higress's Redis extension (see `redis_call.rs`).
pub(super) fn add_redis(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_redis_init",
        |mut c: Ctx,
         cluster_ptr: u32,
         cluster_len: u32,
         user_ptr: u32,
         user_len: u32,
         password_ptr: u32,
         password_len: u32,
         timeout_ms: u32|
         -> Result<i32> {
            const F: &str = "proxy_redis_init";
            let cluster = read(&mut c, F, cluster_ptr, cluster_len)?;
            let cluster = String::from_utf8_lossy(&cluster).into_owned();
            // Go gives an empty string as a null pointer: only read real ones.
            let text = |c: &mut Ctx, ptr, len| -> Result<Option<String>> {
                Ok(match len {
                    0 => None,
                    _ => Some(String::from_utf8_lossy(&read(c, F, ptr, len)?).into_owned()),
                })
            };
            let username = text(&mut c, user_ptr, user_len)?;
            let password = text(&mut c, password_ptr, password_len)?;
            let base = base_cluster(&cluster).to_string();
            if c.data()
                .plugin
                .config
                .services
                .redis_for_cluster(&base)
                .is_none()
            {
                return Ok(BAD_ARGUMENT);
            }
            let init = RedisInit {
                access: wasmgate_services::redis::Access {
                    username,
                    password,
                    db: wasmgate_services::redis::db_of_cluster(&cluster),
                },
                timeout: match timeout_ms {
                    0 => None,
                    ms => Some(std::time::Duration::from_millis(ms as u64)),
                },
            };
            c.data_mut().redis_inits.insert(base, init);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_redis_call",
        |mut c: Ctx,
         cluster_ptr: u32,
         cluster_len: u32,
         query_ptr: u32,
         query_len: u32,
         token_out: u32|
         -> Result<i32> {
            const F: &str = "proxy_redis_call";
            let cluster = read(&mut c, F, cluster_ptr, cluster_len)?;
            let cluster = String::from_utf8_lossy(&cluster).into_owned();
            let query = read(&mut c, F, query_ptr, query_len)?;
            let base = base_cluster(&cluster).to_string();
            let state = c.data_mut();
            if query.is_empty()
                || state
                    .plugin
                    .config
                    .services
                    .redis_for_cluster(&base)
                    .is_none()
            {
                return Ok(BAD_ARGUMENT);
            }
            if let Some(status) = too_many_calls(&c, F) {
                return Ok(status);
            }
            let state = c.data_mut();
            // A call without init uses the service's own credentials, as
            // Envoy uses its defaults.
            let init = state.redis_inits.get(&base).cloned();
            let mut access = init.as_ref().map(|i| i.access.clone()).unwrap_or_default();
            if let Some(db) = wasmgate_services::redis::db_of_cluster(&cluster) {
                access.db = Some(db);
            }
            let token = state.dispatch(Callout::Redis(RedisCallRequest {
                cluster: base,
                access,
                query,
                timeout: init.and_then(|i| i.timeout),
            }));
            write_u32(&mut c, F, token_out, token)?;
            Ok(OK)
        },
    )?;
    Ok(())
}
