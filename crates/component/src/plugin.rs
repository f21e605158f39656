//! A loaded `wasi:http` component and how it answers one request.
//!
//! The component is linked once (`ProxyPre`: imports resolved, type-checked)
//! when it loads. Each request then:
//!
//! 1. leases a fresh instance from the plugin's pool (isolation mode: never
//!    reused; the pool bounds how many run at once, queues a burst for
//!    `queue_timeout`, and backs off a component whose instances fail to
//!    start), instantiated in a new store from the pooling allocator's
//!    copy-on-write memory images;
//! 2. calls `wasi:http/incoming-handler.handle` on a task of its own, under
//!    the slow lane (a component that computes for long leaves the request
//!    workers) and the call's deadline (epochs interrupt running guest code;
//!    a timer ends a guest waiting on something that never comes);
//! 3. answers as soon as the guest sets its response: the body streams from
//!    the guest while the task runs on. When the task ends, the call is
//!    counted and a failure becomes a crash report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use wasmgate_runtime::guest_log::LogStream;
use wasmgate_runtime::limits::install_epoch_policy;
use wasmgate_runtime::{
    AcquireError, CallBudget, CrashReport, FailureKind, InstancePool, Lease, MemoryLimiter,
    PluginStats, PoolConfig, PoolStats, Runtime,
};
use wasmgate_services::outbound_http::AllowedHosts;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::Store;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpView};

use crate::outgoing::Outgoing;
use crate::response_body::{CallTask, ResponseBody};
use crate::state::RequestState;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// The name crash reports and statistics give the component's one entry point.
const HANDLE: &str = "handle";

/// How a component runs and what it may reach. Nothing is granted by
/// default: no outgoing hosts, no directories, no environment.
#[derive(Clone, Debug)]
pub struct ComponentOptions {
    pub name: String,
    /// Cap on all of one instance's linear memories together, in bytes.
    pub memory_limit: Option<usize>,
    /// Deadline of one request's handling (guest code and its waits).
    pub timeout: Option<Duration>,
    /// Hosts `wasi:http/outgoing-handler` may reach (globs).
    pub allowed_hosts: Vec<String>,
    /// Host directories opened for the guest (`wasi:filesystem`).
    pub preopens: Vec<Preopen>,
    /// Environment variables the guest reads (`wasi:cli/environment`).
    pub env: Vec<(String, String)>,
    /// Most requests handled at once, and how long one waits for a turn.
    /// Instances are never reused (`isolation` is forced on).
    pub pool: PoolConfig,
}

/// A host directory a component may open, at `guest` in its file system.
#[derive(Clone, Debug)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
    pub read_only: bool,
}

impl Preopen {
    /// From the form Extism's `allowed_paths` use too: the host directory,
    /// `ro:` in front for read-only, and the guest path.
    pub fn new(host: &str, guest: &str) -> Preopen {
        let (read_only, host) = match host.strip_prefix("ro:") {
            Some(host) => (true, host),
            None => (false, host),
        };
        Preopen {
            host: PathBuf::from(host),
            guest: guest.to_string(),
            read_only,
        }
    }
}

/// Why a request got no answer from the component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// No instance could be had (all busy, or backing off after failures).
    #[error(transparent)]
    Unavailable(AcquireError),
    /// The guest trapped, ran out of time or memory, or a host call failed,
    /// before it set its response.
    #[error("{0}")]
    Crash(Box<CrashReport>),
    /// The guest answered with an error code instead of a response.
    #[error("the component answered with the wasi:http error {0}")]
    ErrorCode(String),
    /// The guest returned without setting its response.
    #[error("the component returned from `handle` without setting a response")]
    NoResponse,
}

impl ComponentError {
    /// The error's name in answers, logs and metrics (as Extism calls').
    pub fn kind(&self) -> &'static str {
        match self {
            ComponentError::Unavailable(AcquireError::Overloaded { .. }) => "overloaded",
            ComponentError::Unavailable(AcquireError::BackingOff { .. }) => "backing_off",
            ComponentError::Unavailable(AcquireError::Instantiate(_)) => "instantiate_failed",
            ComponentError::Crash(report) => report.kind.as_str(),
            ComponentError::ErrorCode(_) | ComponentError::NoResponse => "plugin_error",
        }
    }

    pub fn crash_report(&self) -> Option<&CrashReport> {
        match self {
            ComponentError::Crash(report) => Some(report),
            _ => None,
        }
    }
}

pub struct ComponentPlugin {
    shared: Arc<Shared>,
    pool: InstancePool<Instance>,
}

/// What the request tasks share with the plugin.
struct Shared {
    name: Arc<str>,
    pre: ProxyPre<RequestState>,
    options: ComponentOptions,
    allowed: Arc<AllowedHosts>,
    stats: Arc<PluginStats>,
    /// The guest's stdout and stderr, as log events under its name (made
    /// once: each request's WASI context gets clones).
    output: (LogStream, LogStream),
}

/// One request's instance and its store.
struct Instance {
    store: Store<RequestState>,
    proxy: Proxy,
}

impl ComponentPlugin {
    /// Links `component` against WASI (its command-world interfaces, with
    /// nothing granted but what `options` lists) and `wasi:http`. Fails when
    /// the component needs imports the host does not have, or does not
    /// export `wasi:http/incoming-handler`.
    pub fn new(
        runtime: &Runtime,
        component: &Component,
        options: ComponentOptions,
    ) -> anyhow::Result<ComponentPlugin> {
        let mut linker = Linker::<RequestState>::new(runtime.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        let pre = linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .context("the component imports something the host does not provide")?;
        let pre = ProxyPre::new(pre).map_err(anyhow::Error::from).context(
            "the component does not export wasi:http/incoming-handler (the wasi:http/proxy world)",
        )?;
        for dir in &options.preopens {
            anyhow::ensure!(
                dir.host.is_dir(),
                "directory {} (for the guest's {}) does not exist",
                dir.host.display(),
                dir.guest
            );
        }
        let pool = InstancePool::new(PoolConfig {
            isolation: true,
            ..options.pool.clone()
        });
        Ok(ComponentPlugin {
            pool,
            shared: Arc::new(Shared {
                name: options.name.as_str().into(),
                // A component is shared by the routes that end in it: its log
                // lines name no route.
                output: LogStream::pair(&options.name, ""),
                pre,
                allowed: Arc::new(AllowedHosts::new(&options.allowed_hosts)),
                options,
                stats: Arc::default(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn stats(&self) -> &PluginStats {
        &self.shared.stats
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Handles one request (`request_id` names it in crash reports): the
    /// guest's response, whose body streams on after this returns, or why
    /// there is none. The request must have an authority (its URI's or a
    /// `Host` header).
    pub async fn handle<B>(
        &self,
        request: http::Request<B>,
        scheme: Scheme,
        request_id: u64,
    ) -> Result<http::Response<ResponseBody>, ComponentError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let shared = &self.shared;
        let lease = self
            .pool
            .acquire(|| shared.instantiate())
            .await
            .map_err(ComponentError::Unavailable)?;
        let request = request.map(|body| {
            http_body_util::BodyExt::map_err(body, |e| {
                wasmtime_wasi_http::Error::InternalError(Some(e.into().to_string()))
            })
        });
        let (answer, answered) = tokio::sync::oneshot::channel();
        let task = AbortUnlessAnswered(Some(tokio::spawn(serve_request(
            shared.clone(),
            lease,
            request,
            scheme,
            answer,
            request_id,
        ))));
        match answered.await {
            // The body is whole only if the call ends well (response_body.rs).
            Ok(Ok(response)) => {
                let call = task.into_call();
                Ok(response.map(|body| ResponseBody::new(body, call)))
            }
            Ok(Err(code)) => {
                task.detach();
                Err(ComponentError::ErrorCode(format!("{code:?}")))
            }
            // The store (and its outparam) is gone: the task ended first.
            Err(_) => match task.join().await {
                Some(Err(report)) => Err(ComponentError::Crash(report)),
                Some(Ok(())) => Err(ComponentError::NoResponse),
                None => Err(ComponentError::Crash(Box::new(CrashReport {
                    plugin: shared.name.to_string(),
                    function: HANDLE.into(),
                    kind: FailureKind::HostError,
                    message: "the request's task panicked".into(),
                    frames: Vec::new(),
                    request_id: Some(request_id),
                }))),
            },
        }
    }
}

impl Shared {
    /// A new store with this plugin's grants and limits, and the
    /// component instantiated in it.
    fn instantiate(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<Instance>> + Send>> {
        let state = self.request_state();
        let pre = self.pre.clone();
        let name = self.name.clone();
        let timeout = self.options.timeout;
        Box::pin(async move {
            let mut store = Store::new(pre.engine(), state?);
            store.limiter(|state| &mut state.limiter);
            install_epoch_policy(&mut store);
            // Instantiation runs guest code (start functions, a Python
            // component's initialisation): under the deadline too.
            store.data_mut().budget.start(timeout);
            store.set_epoch_deadline(1);
            let proxy = pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| CrashReport::start_failure(&name, "instantiation", e))?;
            Ok(Instance { store, proxy })
        })
    }

    fn request_state(&self) -> anyhow::Result<RequestState> {
        let mut wasi = WasiCtxBuilder::new();
        let (stdout, stderr) = self.output.clone();
        wasi.stdout(stdout).stderr(stderr);
        wasi.envs(&self.options.env);
        for dir in &self.options.preopens {
            let perms = match dir.read_only {
                true => FsPerms::ReadOnly,
                false => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("opening {} for the component", dir.host.display()))?;
        }
        let limiter = MemoryLimiter::new(self.options.memory_limit).counted_in(self.stats.clone());
        Ok(RequestState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            outgoing: Outgoing {
                allowed: self.allowed.clone(),
            },
            limiter,
            budget: CallBudget::new(),
            plugin: self.name.clone(),
        })
    }
}

type Answer = tokio::sync::oneshot::Sender<Result<http::Response<HyperOutgoingBody>, ErrorCode>>;

/// The request's task: the guest's `handle` from start to end (its response
/// body included), then the call counted and a failure reported.
async fn serve_request<B>(
    shared: Arc<Shared>,
    mut lease: Lease<Instance>,
    request: http::Request<B>,
    scheme: Scheme,
    answer: Answer,
    request_id: u64,
) -> Result<(), Box<CrashReport>>
where
    B: http_body::Body<Data = Bytes, Error = wasmtime_wasi_http::Error> + Send + 'static,
{
    let timeout = shared.options.timeout;
    let started = wasmgate_runtime::call_clock::Instant::now();
    // The lease moves with the call (to the slow lane, if it runs long) and
    // comes back with its outcome.
    let call = async move {
        let Instance { store, proxy } = lease.instance();
        let prepared = (|| {
            let mut http = store.data_mut().http();
            let request = http.new_incoming_request(scheme, request)?;
            let outparam = http.new_response_outparam(answer)?;
            wasmtime::Result::Ok((request, outparam))
        })();
        let result = match prepared {
            Err(e) => Err(e),
            Ok((request, outparam)) => {
                store.data_mut().budget.start(timeout);
                store.set_epoch_deadline(1);
                let call =
                    proxy
                        .wasi_http_incoming_handler()
                        .call_handle(&mut *store, request, outparam);
                match timeout {
                    // A guest waiting on I/O runs no code for epochs to
                    // interrupt: the timer ends it (a little after them).
                    Some(limit) => tokio::time::timeout(limit + Duration::from_millis(5), call)
                        .await
                        .unwrap_or_else(|_| {
                            store.data_mut().budget.mark_timed_out();
                            Err(wasmtime::Trap::Interrupt.into())
                        }),
                    None => call.await,
                }
            }
        };
        (result, lease)
    };
    let finished = wasmgate_runtime::slow_lane::run(started, Box::pin(call)).await;
    shared.stats.record_call(finished.wall, finished.cpu);
    let (result, mut lease) = finished.output;
    let timed_out = lease.instance().store.data_mut().budget.timed_out();
    match result {
        Ok(()) => {
            lease.release();
            Ok(())
        }
        Err(error) => {
            let mut report = CrashReport::from_error(&shared.name, HANDLE, &error, timed_out);
            report.request_id = Some(request_id);
            tracing::warn!(plugin = %shared.name, request_id, "{report}");
            shared.stats.record_crash(&report);
            Err(Box::new(report))
        }
    }
}

/// The request's task, aborted if the request is dropped before the guest
/// answered (the client left); once it answered, the task runs on to write
/// the body.
struct AbortUnlessAnswered(Option<CallTask>);

impl AbortUnlessAnswered {
    fn detach(mut self) {
        self.0 = None;
    }

    /// The task, left to run (the response body waits for its outcome).
    fn into_call(mut self) -> CallTask {
        self.0.take().expect("the task is held until answered")
    }

    /// The task's outcome; `None` if it panicked.
    async fn join(mut self) -> Option<Result<(), Box<CrashReport>>> {
        let task = self.0.take()?;
        task.await.ok()
    }
}

impl Drop for AbortUnlessAnswered {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}
