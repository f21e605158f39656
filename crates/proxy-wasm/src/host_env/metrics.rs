//! Metrics (`proxy_define_metric`, `proxy_increment_metric`,
//! `proxy_record_metric`, `proxy_get_metric`): counters, gauges and
//! histograms kept per plugin in `shared.rs`.

use wasmtime::Linker;

use super::{Ctx, Result, BAD_ARGUMENT, MODULE, NOT_FOUND, OK};
use crate::shared::{shared, MetricKind};
use crate::state::{read, write, write_u32, FilterState};

pub(super) fn add_metrics(linker: &mut Linker<FilterState>) -> Result<()> {
    linker.func_wrap(
        MODULE,
        "proxy_define_metric",
        |mut c: Ctx, kind: i32, name_ptr: u32, name_len: u32, id_out: u32| -> Result<i32> {
            let kind = match kind {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Ok(BAD_ARGUMENT),
            };
            let name = read(&mut c, "proxy_define_metric", name_ptr, name_len)?;
            let plugin = c.data().plugin.config.name.clone();
            let id = shared().define_metric(kind, &plugin, &String::from_utf8_lossy(&name));
            write_u32(&mut c, "proxy_define_metric", id_out, id)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_increment_metric",
        |c: Ctx, id: u32, offset: i64| {
            shared().increment_metric(id, &c.data().plugin.config.name, offset) as i32
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_record_metric",
        |c: Ctx, id: u32, value: i64| {
            shared().record_metric(id, &c.data().plugin.config.name, value) as i32
        },
    )?;
    linker.func_wrap(
        MODULE,
        "proxy_get_metric",
        |mut c: Ctx, id: u32, out: u32| -> Result<i32> {
            let Some(metric) = shared()
                .metric(id)
                .filter(|m| m.plugin == c.data().plugin.config.name)
            else {
                return Ok(NOT_FOUND);
            };
            let value = match metric.kind {
                MetricKind::Histogram => return Ok(BAD_ARGUMENT),
                _ => metric.value as u64,
            };
            write(&mut c, "proxy_get_metric", out, &value.to_le_bytes())?;
            Ok(OK)
        },
    )?;
    Ok(())
}
