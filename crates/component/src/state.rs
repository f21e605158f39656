//! What one request's store holds: its WASI context (nothing granted but
//! what the operator listed: directories, environment variables), its
//! `wasi:http` context and resource table, the hooks that send its outgoing
//! requests, and the limits every ABI's stores carry.

use std::sync::Arc;

use wasmgate_runtime::limits::HasCallBudget;
use wasmgate_runtime::{CallBudget, MemoryLimiter};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::outgoing::Outgoing;

pub(crate) struct RequestState {
    pub wasi: WasiCtx,
    pub http: WasiHttpCtx,
    pub table: ResourceTable,
    pub outgoing: Outgoing,
    pub limiter: MemoryLimiter,
    pub budget: CallBudget,
    pub plugin: Arc<str>,
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outgoing,
        }
    }
}

impl HasCallBudget for RequestState {
    fn call_budget(&mut self) -> &mut CallBudget {
        &mut self.budget
    }

    fn plugin_name(&self) -> &str {
        &self.plugin
    }
}
