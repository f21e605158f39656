//! R6 of the reliability suite (issue 4): a long-running property test that
//! drives every Proxy-Wasm host function with hostile pointers, lengths and
//! sequences, in every stream phase, and checks that the host never panics,
//! that every failure is a clean error attributable to the host function
//! that refused the call, that failed instances are replaced, and that a
//! well-formed request through the same plugin still works after each batch.
//!
//! The guest is one hand-written module, generated from [`HOST_FUNCTIONS`]:
//! it imports every host function and interprets a script of calls. The
//! test writes one script per phase into the stream's properties; the guest
//! fetches it with `proxy_get_property` before every call (a hostile call may
//! have overwritten any byte of its memory) and reports each call with
//! `proxy_set_property` under a key that holds a nonce compiled into the
//! guest's code and erased from memory after use, so no hostile call can
//! forge or overwrite a report. Configure and VM-start phases read their
//! scripts from the plugin and VM configuration and report through shared
//! data instead (the exchange does not outlive them).
//!
//! `WASMGATE_FUZZ_ITERS` (streams, default 10000), `WASMGATE_FUZZ_SEED`
//! (default fixed) and `WASMGATE_FUZZ_SECS` (optional time cap) steer it;
//! `reliability/r6_fuzz.sh` runs it for minutes. The summary is printed with
//! `--nocapture`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use wasmgate_proxy_wasm::shared::shared;
use wasmgate_proxy_wasm::{
    FilterConfig, FilterError, FilterPlugin, Flow, Headers, HttpCallFuture, HttpCallRequest,
    HttpCallResponse, HttpCaller, HttpExchange, HttpStreamFuture, HttpStreamRequest,
    HttpStreamResponse, RequestInfo, Runtime, RuntimeConfig, StreamBody, StreamPart,
};
use wasmgate_testkit::fuzz::{env_u64, LogSink, Rng};

// ---------------------------------------------------------------------------
// The host functions and the roles of their parameters.

/// What a parameter is, so arguments can be valid often enough to reach deep
/// into the host and hostile often enough to hit every check.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum P {
    /// A (pointer, length) pair, with the kind of bytes it should usually hold.
    Bytes,
    Key,
    Value,
    Path,
    Name,
    Upstream,
    Map,
    /// Where the host writes a result.
    Out,
    Level,
    BufKind,
    MapKind,
    StreamKind,
    MetricKind,
    Tick,
    Context,
    /// A queue or metric id.
    Id,
    /// Any number (offsets, sizes, CAS tokens, status codes, timeouts).
    Num,
    I64,
}

impl P {
    fn is_buf(self) -> bool {
        matches!(
            self,
            P::Bytes | P::Key | P::Value | P::Path | P::Name | P::Upstream | P::Map
        )
    }

    /// Argument slots the parameter takes in a script op.
    fn slots(self) -> usize {
        if self.is_buf() || self == P::I64 {
            2
        } else {
            1
        }
    }
}

struct HostFn {
    name: &'static str,
    params: &'static [P],
    /// Whether it returns a status (only the stub of an unknown import without
    /// a result does not).
    returns_status: bool,
}

const fn f(name: &'static str, params: &'static [P]) -> HostFn {
    HostFn {
        name,
        params,
        returns_status: true,
    }
}

use P::*;

/// Every function `host_env/` links (checked against its source by
/// `the_table_names_every_host_function`), plus two `env` imports the host
/// does not know, which it stubs at load.
const HOST_FUNCTIONS: &[HostFn] = &[
    f("proxy_log", &[Level, Bytes]),
    f("proxy_get_log_level", &[Out]),
    f("proxy_get_current_time_nanoseconds", &[Out]),
    f("proxy_set_tick_period_milliseconds", &[Tick]),
    f("proxy_get_buffer_bytes", &[BufKind, Num, Num, Out, Out]),
    f("proxy_set_buffer_bytes", &[BufKind, Num, Num, Bytes]),
    f("proxy_get_header_map_pairs", &[MapKind, Out, Out]),
    f("proxy_set_header_map_pairs", &[MapKind, Map]),
    f("proxy_get_header_map_value", &[MapKind, Key, Out, Out]),
    f("proxy_replace_header_map_value", &[MapKind, Key, Value]),
    f("proxy_add_header_map_value", &[MapKind, Key, Value]),
    f("proxy_remove_header_map_value", &[MapKind, Key]),
    f("proxy_get_header_map_size", &[MapKind, Out]),
    f("proxy_get_property", &[Path, Out, Out]),
    f("proxy_set_property", &[Path, Value]),
    f("proxy_continue_stream", &[StreamKind]),
    f("proxy_close_stream", &[StreamKind]),
    f("proxy_continue_request", &[]),
    f("proxy_continue_response", &[]),
    f("proxy_send_local_response", &[Num, Value, Value, Map, Num]),
    f("proxy_set_effective_context", &[Context]),
    f("proxy_http_call", &[Upstream, Map, Value, Map, Num, Out]),
    f("proxy_done", &[]),
    f("proxy_get_status", &[Out, Out, Out]),
    f("proxy_get_shared_data", &[Name, Out, Out, Out]),
    f("proxy_set_shared_data", &[Name, Value, Num]),
    f("proxy_register_shared_queue", &[Name, Out]),
    f("proxy_resolve_shared_queue", &[Name, Name, Out]),
    f("proxy_enqueue_shared_queue", &[Id, Value]),
    f("proxy_dequeue_shared_queue", &[Id, Out, Out]),
    f("proxy_define_metric", &[MetricKind, Name, Out]),
    f("proxy_increment_metric", &[Id, I64]),
    f("proxy_record_metric", &[Id, I64]),
    f("proxy_get_metric", &[Id, Out]),
    f("proxy_redis_init", &[Upstream, Bytes, Bytes, Num]),
    f("proxy_redis_call", &[Upstream, Bytes, Out]),
    f(
        "proxy_grpc_call",
        &[Upstream, Name, Name, Map, Bytes, Num, Out],
    ),
    f("proxy_grpc_stream", &[Upstream, Name, Name, Map, Out]),
    f("proxy_grpc_send", &[Num, Bytes, Num]),
    f("proxy_grpc_cancel", &[Num]),
    f("proxy_grpc_close", &[Num]),
    f("proxy_call_foreign_function", &[Num; 6]),
    f("proxy_fuzz_unknown_with_status", &[Num]),
    HostFn {
        name: "proxy_fuzz_unknown_without_status",
        params: &[Num],
        returns_status: false,
    },
];

/// Names of the unknown imports above (stubbed by the host, not linked).
const STUBBED: &[&str] = &[
    "proxy_fuzz_unknown_with_status",
    "proxy_fuzz_unknown_without_status",
];

fn host_fn(name: &str) -> u32 {
    HOST_FUNCTIONS
        .iter()
        .position(|h| h.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the table")) as u32
}

/// The statuses of the ABI (`abi::Status`): a host function returns nothing else.
const STATUSES: &[u32] = &[0, 1, 2, 3, 4, 7, 8, 10, 12];

// ---------------------------------------------------------------------------
// The guest.

/// One page less than would make `MEM` a round hostile number on its own.
const PAGES: u32 = 2;
const MEM: u32 = PAGES * 65536;
/// Harness scratch: report keys and script paths.
const PATH: u32 = 0x100;
/// Harness scratch: report values.
const VALUE: u32 = 0x140;
/// Where the harness's own `proxy_get_property` writes pointer and length.
const SLOT: u32 = 0x180;
/// Out-parameter slots (4 bytes each) for the calls under test.
const OUT: u32 = 0x200;
const OUT_SLOTS: u32 = 64;
/// The script's data blob is copied here at the start of each phase.
const DATA: u32 = 0x1000;
const DATA_MAX: u32 = 0x3000;
/// The guest allocator's arena (wraps around).
const HEAP: u32 = 0x4000;
const HEADER: u32 = 96;
const OP_SIZE: u32 = 56;
const ARGS: usize = 12;
/// Report status of a call that has started and not returned.
const STARTED: u32 = u32::MAX;
/// In report keys and script paths; never in guest memory for longer than
/// one harness call.
const NONCE: u64 = 0x5eed_f022_a7e5_0006;

/// Phases, as the guest numbers them.
const REQUEST_HEADERS: u8 = 0;
const REQUEST_BODY: u8 = 1;
const REQUEST_TRAILERS: u8 = 2;
const RESPONSE_HEADERS: u8 = 3;
const RESPONSE_BODY: u8 = 4;
const RESPONSE_TRAILERS: u8 = 5;
const LOG: u8 = 6;
const DONE: u8 = 7;
const DELETE: u8 = 8;
const CALL_RESPONSE: u8 = 9;
const TICK: u8 = 10;
const CONFIGURE: u8 = 11;
const VM_START: u8 = 12;
const PHASES: usize = 13;

/// The callback whose crash report a failure in `phase` produces.
fn callback_of(phase: u32) -> &'static str {
    match phase as u8 {
        REQUEST_HEADERS => "proxy_on_request_headers",
        REQUEST_BODY => "proxy_on_request_body",
        REQUEST_TRAILERS => "proxy_on_request_trailers",
        RESPONSE_HEADERS => "proxy_on_response_headers",
        RESPONSE_BODY => "proxy_on_response_body",
        RESPONSE_TRAILERS => "proxy_on_response_trailers",
        // One crash report covers the three end-of-stream callbacks.
        LOG | DONE | DELETE => "proxy_on_log",
        CALL_RESPONSE => "proxy_on_http_call_response",
        TICK => "proxy_on_tick",
        CONFIGURE => "proxy_on_configure",
        VM_START => "proxy_on_vm_start",
        _ => "unknown phase",
    }
}

fn guest_wat() -> String {
    let mut imports = String::new();
    let mut cases = String::new();
    for (i, h) in HOST_FUNCTIONS.iter().enumerate() {
        let params: Vec<&str> = h
            .params
            .iter()
            .map(|p| match p {
                p if p.is_buf() => "i32 i32",
                P::I64 => "i64",
                _ => "i32",
            })
            .collect();
        let result = if h.returns_status { "(result i32)" } else { "" };
        writeln!(
            imports,
            r#"  (import "env" "{}" (func $h{i} (param {}) {result}))"#,
            h.name,
            params.join(" ")
        )
        .unwrap();
        // Case i of the dispatch: push the arguments, call, return the status.
        writeln!(cases, "    end ;; case {i}").unwrap();
        let mut slot = 0;
        for p in h.params {
            match p {
                p if p.is_buf() => {
                    writeln!(cases, "    local.get $a{slot} local.get $a{}", slot + 1).unwrap()
                }
                P::I64 => writeln!(
                    cases,
                    "    local.get $a{slot} i64.extend_i32_u local.get $a{} i64.extend_i32_u i64.const 32 i64.shl i64.or",
                    slot + 1
                )
                .unwrap(),
                _ => writeln!(cases, "    local.get $a{slot}").unwrap(),
            }
            slot += p.slots();
        }
        writeln!(cases, "    call $h{i}").unwrap();
        if !h.returns_status {
            writeln!(cases, "    i32.const 0").unwrap();
        }
        writeln!(cases, "    return").unwrap();
    }
    let n = HOST_FUNCTIONS.len();
    let blocks: String = (0..=n).map(|_| "    block\n").collect();
    let table: String = (0..=n).map(|i| format!(" {i}")).collect();
    let arg_params: String = (0..ARGS).map(|k| format!(" (param $a{k} i32)")).collect();
    let arg_gets: String = (0..ARGS).map(|k| format!(" (local.get $a{k})")).collect();
    let resolve_args: String = (0..ARGS)
        .map(|k| {
            format!(
                "    (local.set $a{k} (call $arg (local.get $m) (i32.const {k}) (local.get $a{k})))\n"
            )
        })
        .collect();
    let re_globals: String = (0..ARGS)
        .map(|k| format!("  (global $re{k} (mut i32) (i32.const 0))\n"))
        .collect();
    let re_gets: String = (0..ARGS).map(|k| format!(" (global.get $re{k})")).collect();
    let re_loads: String = (0..ARGS)
        .map(|k| {
            format!(
                "    (global.set $re{k} (i32.load offset={} (global.get $script)))\n",
                40 + 4 * k
            )
        })
        .collect();
    let op_loads: String = (0..ARGS)
        .map(|k| format!(" (i32.load offset={} (local.get $op))", 8 + 4 * k))
        .collect();
    let get_property = host_fn("proxy_get_property");
    let set_property = host_fn("proxy_set_property");
    let get_buffer = host_fn("proxy_get_buffer_bytes");
    let set_shared = host_fn("proxy_set_shared_data");
    let set_tick = host_fn("proxy_set_tick_period_milliseconds");
    let continue_stream = host_fn("proxy_continue_stream");
    let nonce = NONCE as i64;
    let heap_size = MEM - HEAP;
    format!(
        r#"(module
{imports}
  (memory (export "memory") {PAGES})
  (global $bump (mut i32) (i32.const {HEAP}))
  (global $inv (mut i32) (i32.const 0))
  (global $seq (mut i32) (i32.const 0))
  (global $phase (mut i32) (i32.const 0))
  (global $root (mut i32) (i32.const 0))
  (global $harness (mut i32) (i32.const 0))
  (global $mode (mut i32) (i32.const 0))
  (global $mode_value (mut i32) (i32.const 0))
  (global $depth (mut i32) (i32.const 0))
  (global $max_depth (mut i32) (i32.const 0))
  (global $script (mut i32) (i32.const 0))
  (global $re_f (mut i32) (i32.const 0))
  (global $re_m (mut i32) (i32.const 0))
{re_globals}
  (func (export "proxy_abi_version_0_2_1"))

  (func $bump_alloc (param $n i32) (result i32) (local $p i32)
    (if (i32.gt_u (local.get $n) (i32.const {heap_size})) (then (return (i32.const 0))))
    (if (i32.gt_u (i32.add (global.get $bump) (local.get $n)) (i32.const {MEM}))
      (then (global.set $bump (i32.const {HEAP}))))
    (local.set $p (global.get $bump))
    (global.set $bump (i32.and (i32.add (i32.add (local.get $p) (local.get $n)) (i32.const 7)) (i32.const -8)))
    (local.get $p))

  ;; Mode 1 answers with a hostile pointer; mode 2 first makes another host
  ;; call (re-entering the host from inside one of its own calls).
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (if (i32.eqz (global.get $harness))
      (then
        (if (i32.eq (global.get $mode) (i32.const 1)) (then (return (global.get $mode_value))))
        (if (i32.and (i32.eq (global.get $mode) (i32.const 2))
                     (i32.lt_u (global.get $depth) (global.get $max_depth)))
          (then
            (global.set $depth (i32.add (global.get $depth) (i32.const 1)))
            (drop (call $exec (global.get $re_f) (global.get $re_m){re_gets}))
            (global.set $depth (i32.sub (global.get $depth) (i32.const 1)))))))
    (call $bump_alloc (local.get $n)))

  ;; An argument, or (mask bit set) the word at its low 16 bits plus its
  ;; high 16 bits as a signed offset: a pointer or length the host gave.
  (func $arg (param $m i32) (param $k i32) (param $v i32) (result i32)
    (if (result i32) (i32.and (local.get $m) (i32.shl (i32.const 1) (local.get $k)))
      (then (i32.add (i32.load (i32.and (local.get $v) (i32.const 0xffff)))
                     (i32.shr_s (local.get $v) (i32.const 16))))
      (else (local.get $v))))

  (func $report (param $seq i32) (param $f i32) (param $status i32)
    (global.set $harness (i32.const 1))
    (i64.store (i32.const {PATH}) (i64.const {nonce}))
    (i32.store8 (i32.const {PATH_R}) (i32.const 0x72))
    (i32.store (i32.const {PATH_INV})
      (if (result i32) (global.get $root)
        (then (i32.or (i32.const 0xffff0000) (global.get $phase)))
        (else (global.get $inv))))
    (i32.store (i32.const {PATH_SEQ}) (local.get $seq))
    (i32.store8 (i32.const {PATH_LAST}) (i32.const 0x2e))
    (i32.store (i32.const {VALUE}) (local.get $f))
    (i32.store (i32.const {VALUE_STATUS}) (local.get $status))
    (i32.store (i32.const {VALUE_PHASE}) (global.get $phase))
    (i32.store (i32.const {VALUE_DEPTH}) (global.get $depth))
    (if (global.get $root)
      (then (if (call $h{set_shared} (i32.const {PATH}) (i32.const 18) (i32.const {VALUE}) (i32.const 16) (i32.const 0))
        (then unreachable)))
      (else (if (call $h{set_property} (i32.const {PATH}) (i32.const 18) (i32.const {VALUE}) (i32.const 16))
        (then unreachable))))
    (i64.store (i32.const {PATH}) (i64.const 0))
    (i64.store (i32.const {PATH_R}) (i64.const 0))
    (i32.store16 (i32.const {PATH_SEQ_END}) (i32.const 0))
    (global.set $harness (i32.const 0)))

  ;; One call under test: resolve indirect arguments, report it started,
  ;; make it, report its status.
  (func $exec (param $f i32) (param $m i32){arg_params} (result i32)
    (local $seq i32) (local $s i32)
{resolve_args}
    (global.set $seq (i32.add (global.get $seq) (i32.const 1)))
    (local.set $seq (global.get $seq))
    (call $report (local.get $seq) (local.get $f) (i32.const -1))
    (local.set $s (call $dispatch (local.get $f){arg_gets}))
    (call $report (local.get $seq) (local.get $f) (local.get $s))
    (local.get $s))

  (func $dispatch (param $f i32){arg_params} (result i32)
{blocks}    local.get $f
    br_table{table}
{cases}    end ;; default
    i32.const -1)

  ;; Fetches this phase's script (again: a call may have overwritten the
  ;; last copy); 1 if there is one, at $script.
  (func $fetch (result i32) (local $s i32)
    (global.set $harness (i32.const 1))
    (if (global.get $root)
      (then
        (local.set $s (call $h{get_buffer}
          (select (i32.const 7) (i32.const 6) (i32.eq (global.get $phase) (i32.const {CONFIGURE})))
          (i32.const 0) (i32.const 0x7fffffff) (i32.const {SLOT}) (i32.const {SLOT_LEN}))))
      (else
        (i64.store (i32.const {PATH}) (i64.const {nonce}))
        (i32.store8 (i32.const {PATH_R}) (i32.const 0x73))
        (i32.store8 (i32.const {PATH_INV}) (global.get $phase))
        (i32.store8 (i32.const {PATH_INV_END}) (i32.const 0x2e))
        (local.set $s (call $h{get_property} (i32.const {PATH}) (i32.const 11) (i32.const {SLOT}) (i32.const {SLOT_LEN})))
        (i64.store (i32.const {PATH}) (i64.const 0))
        (i32.store16 (i32.const {PATH_R}) (i32.const 0))
        (i32.store8 (i32.const {PATH_INV_END}) (i32.const 0))))
    (global.set $harness (i32.const 0))
    (if (local.get $s) (then (return (i32.const 0))))
    (if (i32.lt_u (i32.load (i32.const {SLOT_LEN})) (i32.const {HEADER})) (then (return (i32.const 0))))
    (global.set $script (i32.load (i32.const {SLOT})))
    (i32.const 1))

  ;; Script: header (n_ops, action, tick, alloc mode, alloc value, max depth,
  ;; data length, -, re-entrant op: f, mask, 12 args), data, ops (f, mask, 12 args).
  (func $run (param $phase i32) (param $default i32) (result i32)
    (local $i i32) (local $n i32) (local $action i32) (local $tick i32) (local $op i32)
    (global.set $phase (local.get $phase))
    (global.set $root (i32.ge_u (local.get $phase) (i32.const {CONFIGURE})))
    (global.set $inv (i32.add (global.get $inv) (i32.const 1)))
    (global.set $seq (i32.const 0))
    (if (i32.eqz (call $fetch)) (then (return (local.get $default))))
    (local.set $n (i32.load (global.get $script)))
    (local.set $action (i32.load offset=4 (global.get $script)))
    (local.set $tick (i32.load offset=8 (global.get $script)))
    (memory.copy (i32.const {DATA}) (i32.add (global.get $script) (i32.const {HEADER}))
      (i32.load offset=24 (global.get $script)))
    (global.set $mode_value (i32.load offset=16 (global.get $script)))
    (global.set $max_depth (i32.load offset=20 (global.get $script)))
    (global.set $re_f (i32.load offset=32 (global.get $script)))
    (global.set $re_m (i32.load offset=36 (global.get $script)))
{re_loads}    (global.set $mode (i32.load offset=12 (global.get $script)))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (if (i32.eqz (call $fetch)) (then unreachable))
      (local.set $op (i32.add (i32.add (global.get $script) (i32.const {HEADER}))
        (i32.add (i32.load offset=24 (global.get $script)) (i32.mul (local.get $i) (i32.const {OP_SIZE})))))
      (drop (call $exec (i32.load (local.get $op)) (i32.load offset=4 (local.get $op)){op_loads}))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (global.set $mode (i32.const 0))
    ;; Stream phases set the tick period they want for a pause (so a hostile
    ;; period from a call cannot stall the stream for days); a tick resumes.
    (global.set $harness (i32.const 1))
    (if (i32.eqz (global.get $root))
      (then (drop (call $h{set_tick} (local.get $tick)))))
    (if (i32.eq (local.get $phase) (i32.const {TICK}))
      (then
        (drop (call $h{continue_stream} (i32.const 0)))
        (drop (call $h{continue_stream} (i32.const 1)))))
    (global.set $harness (i32.const 0))
    (local.get $action))

  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (call $run (i32.const {VM_START}) (i32.const 1)))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (call $run (i32.const {CONFIGURE}) (i32.const 1)))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (call $run (i32.const {REQUEST_HEADERS}) (i32.const 0)))
  (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32) (call $run (i32.const {REQUEST_BODY}) (i32.const 0)))
  (func (export "proxy_on_request_trailers") (param i32 i32) (result i32) (call $run (i32.const {REQUEST_TRAILERS}) (i32.const 0)))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (call $run (i32.const {RESPONSE_HEADERS}) (i32.const 0)))
  (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32) (call $run (i32.const {RESPONSE_BODY}) (i32.const 0)))
  (func (export "proxy_on_response_trailers") (param i32 i32) (result i32) (call $run (i32.const {RESPONSE_TRAILERS}) (i32.const 0)))
  (func (export "proxy_on_log") (param i32) (drop (call $run (i32.const {LOG}) (i32.const 0))))
  (func (export "proxy_on_done") (param i32) (result i32) (call $run (i32.const {DONE}) (i32.const 1)))
  (func (export "proxy_on_delete") (param i32) (drop (call $run (i32.const {DELETE}) (i32.const 0))))
  (func (export "proxy_on_http_call_response") (param i32 i32 i32 i32 i32) (drop (call $run (i32.const {CALL_RESPONSE}) (i32.const 0))))
  (func (export "proxy_on_tick") (param i32) (drop (call $run (i32.const {TICK}) (i32.const 0))))
  ;; Only the root instance hears queues; it has no stream, so no script.
  (func (export "proxy_on_queue_ready") (param i32 i32) (drop (call $run (i32.const 13) (i32.const 0))))
)"#,
        PATH_R = PATH + 8,
        PATH_INV = PATH + 9,
        PATH_SEQ = PATH + 13,
        PATH_SEQ_END = PATH + 16,
        PATH_LAST = PATH + 17,
        PATH_INV_END = PATH + 10,
        VALUE_STATUS = VALUE + 4,
        VALUE_PHASE = VALUE + 8,
        VALUE_DEPTH = VALUE + 12,
        SLOT_LEN = SLOT + 4,
    )
}

// ---------------------------------------------------------------------------
// Randomness: SplitMix64, seeded, so a failing run can be replayed.

/// Numbers that sit on the edges of the guest's memory and of u32/i32.
fn edge(rng: &mut Rng) -> u32 {
    let choices = [
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        16,
        0xff,
        0x100,
        0xfff,
        0xffff,
        0x1_0000,
        MEM - 1,
        MEM,
        MEM + 1,
        MEM - 2,
        MEM - 3,
        MEM - 4,
        MEM - 7,
        MEM - 8,
        2 * MEM,
        0x7fff_ffff,
        0x8000_0000,
        0x8000_0001,
        u32::MAX,
        u32::MAX - 1,
        u32::MAX - 3,
        u32::MAX - 7,
        MEM.wrapping_neg(),
        rng.u32(),
    ];
    rng.pick(&choices)
}

// ---------------------------------------------------------------------------
// The data blob: strings, paths and serialized maps the calls point into.

#[derive(Default)]
struct Blob {
    bytes: Vec<u8>,
    /// (pointer in guest memory, length) of each entry, by kind.
    by_kind: BTreeMap<&'static str, Vec<(u32, u32)>>,
    all: Vec<(u32, u32)>,
    /// Bytes before the padding.
    used: u32,
}

impl Blob {
    fn add(&mut self, kind: &'static str, bytes: &[u8]) -> (u32, u32) {
        let entry = (DATA + self.bytes.len() as u32, bytes.len() as u32);
        self.bytes.extend_from_slice(bytes);
        // A NUL after each entry, as C strings from an SDK would have.
        self.bytes.push(0);
        self.by_kind.entry(kind).or_default().push(entry);
        self.all.push(entry);
        entry
    }

    fn kind(&self, kind: &str) -> &[(u32, u32)] {
        self.by_kind.get(kind).map_or(&[], Vec::as_slice)
    }

    /// Pads to a fixed size so that each phase's copy overwrites all of the
    /// last one (a probe's data never survives into a fuzzed stream).
    fn finish(mut self) -> Blob {
        assert!(self.bytes.len() <= DATA_MAX as usize);
        self.used = self.bytes.len() as u32;
        self.bytes.resize(DATA_MAX as usize, 0);
        self
    }
}

fn encode_map(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    wasmgate_proxy_wasm::pairs::encode(pairs)
}

fn fuzz_blob(rng: &mut Rng) -> Blob {
    let mut b = Blob::default();
    let long_name = vec![b'a'; 300];
    let long_value = vec![b'x'; 1000];
    for key in [
        &b":path"[..],
        b":method",
        b":authority",
        b":status",
        b":scheme",
        b"x-probe",
        b"content-length",
        b"X-Mixed-Case",
        b"",
        b"bad\r\nheader",
        b"nul\0inside",
        &long_name,
        b"x-fuzz",
        b"server",
    ] {
        b.add("key", key);
    }
    for value in [
        &b"GET"[..],
        b"/",
        b"/fuzz?q=1&r",
        b"200",
        b"999",
        b"fuzz.local",
        b"",
        b"v\r\nInjected: 1",
        b"\xff\xfe\x00binary",
        &long_value,
    ] {
        b.add("value", value);
    }
    let plugin_name = b.add("plugin-name", b"plugin_name");
    b.by_kind.entry("path").or_default().push(plugin_name);
    for path in [
        &b"request\0path"[..],
        b"request\0headers\0x-probe",
        b"request\0url_path",
        b"request\0query",
        b"request\0method",
        b"request\0host",
        b"request\0scheme",
        b"request\0id",
        b"request\0protocol",
        b"request\0time",
        b"request\0size",
        b"response\0code",
        b"response\0size",
        b"response\0headers\0:status",
        b"plugin_root_id",
        b"plugin_vm_id",
        b"route_name",
        b"cluster_name",
        b"source\0address",
        b"source\0port",
        b"destination\0address",
        b"destination\0port",
        b"connection\0id",
        b"connection\0mtls",
        b"connection\0requested_server_name",
        b"fuzz\0set",
        b"request\0path\0",
        b"\0",
        b"",
        b"request\0headers\0",
    ] {
        b.add("path", path);
    }
    b.add("known-upstream", b"fuzz-upstream");
    for upstream in [&b"fuzz-upstream"[..], b"unknown-upstream", b""] {
        b.add("upstream", upstream);
    }
    for name in [
        &b"k1"[..],
        b"k2",
        b"q1",
        b"q2",
        b"",
        b"fuzz-root",
        b"m_counter",
        b"m_gauge",
        b"m_hist",
    ] {
        b.add("name", name);
    }
    let call = encode_map(&[
        (b":method", b"GET"),
        (b":path", b"/call"),
        (b":authority", b"fuzz-upstream"),
    ]);
    b.add("map", &call);
    b.add(
        "map",
        &encode_map(&[
            (b":method", b"POST"),
            (b":path", b"/call?x"),
            (b"x-bin", b"\x00\xff"),
        ]),
    );
    b.add("map", &encode_map(&[]));
    b.add("map", b"");
    b.add("map", &encode_map(&[(b"Upper-Key", b"value")]));
    b.add("bad-map", &u32::MAX.to_le_bytes());
    b.add("bad-map", &[1, 0, 0, 0]);
    b.add("bad-map", &[1, 0, 0]);
    b.add("bad-map", &0x2000_0000u32.to_le_bytes());
    let mut no_nul = call.clone();
    *no_nul.last_mut().unwrap() = b'!';
    b.add("bad-map", &no_nul);
    let mut long_key = call.clone();
    long_key[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    b.add("bad-map", &long_key);
    b.add("bad-map", &call[..call.len() - 1]);
    let random = rng.bytes(64);
    b.add("random", &random);
    b.finish()
}

// ---------------------------------------------------------------------------
// Scripts.

#[derive(Clone, Copy)]
struct Op {
    f: u32,
    mask: u32,
    args: [u32; ARGS],
}

struct Script {
    ops: Vec<Op>,
    action: u32,
    tick: u32,
    alloc_mode: u32,
    alloc_value: u32,
    max_depth: u32,
    reentrant: Op,
}

impl Script {
    fn new(ops: Vec<Op>) -> Script {
        Script {
            ops,
            action: 0,
            tick: 0,
            alloc_mode: 0,
            alloc_value: 0,
            max_depth: 0,
            reentrant: Op {
                f: 0,
                mask: 0,
                args: [0; ARGS],
            },
        }
    }

    fn encode(&self, blob: &Blob) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER as usize + blob.bytes.len() + 56 * self.ops.len());
        let word = |out: &mut Vec<u8>, w: u32| out.extend_from_slice(&w.to_le_bytes());
        for w in [
            self.ops.len() as u32,
            self.action,
            self.tick,
            self.alloc_mode,
            self.alloc_value,
            self.max_depth,
            blob.bytes.len() as u32,
            0,
            self.reentrant.f,
            self.reentrant.mask,
        ] {
            word(&mut out, w);
        }
        for a in self.reentrant.args {
            word(&mut out, a);
        }
        word(&mut out, 0);
        word(&mut out, 0);
        assert_eq!(out.len(), HEADER as usize);
        out.extend_from_slice(&blob.bytes);
        for op in &self.ops {
            word(&mut out, op.f);
            word(&mut out, op.mask);
            for a in op.args {
                word(&mut out, a);
            }
        }
        out
    }
}

/// An indirect argument: the word at out-slot `slot`, plus `offset`.
fn indirect(slot: u32, offset: i16) -> u32 {
    (u32::from(offset as u16) << 16) | (OUT + 4 * slot)
}

struct OpBuilder {
    f: u32,
    mask: u32,
    args: Vec<u32>,
}

impl OpBuilder {
    fn new(name: &str) -> OpBuilder {
        OpBuilder {
            f: host_fn(name),
            mask: 0,
            args: Vec::new(),
        }
    }

    fn arg(mut self, value: u32) -> Self {
        self.args.push(value);
        self
    }

    fn ind(mut self, slot: u32, offset: i16) -> Self {
        self.mask |= 1 << self.args.len();
        self.args.push(indirect(slot, offset));
        self
    }

    fn buf(self, (ptr, len): (u32, u32)) -> Self {
        self.arg(ptr).arg(len)
    }

    fn out(self, slot: u32) -> Self {
        self.arg(OUT + 4 * slot)
    }

    fn build(self) -> Op {
        let expected: usize = HOST_FUNCTIONS[self.f as usize]
            .params
            .iter()
            .map(|p| p.slots())
            .sum();
        assert_eq!(
            self.args.len(),
            expected,
            "{}",
            HOST_FUNCTIONS[self.f as usize].name
        );
        let mut args = [0; ARGS];
        args[..self.args.len()].copy_from_slice(&self.args);
        Op {
            f: self.f,
            mask: self.mask,
            args,
        }
    }
}

/// Functions that hand the guest bytes through its allocator (and so can
/// re-enter it).
const GIVERS: &[&str] = &[
    "proxy_get_buffer_bytes",
    "proxy_get_header_map_pairs",
    "proxy_get_header_map_value",
    "proxy_get_property",
    "proxy_get_status",
    "proxy_get_shared_data",
    "proxy_dequeue_shared_queue",
];

struct Generator<'a> {
    rng: &'a mut Rng,
    blob: &'a Blob,
    /// Percent of arguments drawn hostile; varies per script so that some
    /// scripts run long sequences of valid calls and others fail at once.
    hostile: u32,
}

/// Out slots that valid calls use, in (pointer, length) pairs, so that a
/// later call finds what an earlier one was given.
const VALID_PAIRS: u32 = 8;

impl Generator<'_> {
    fn op(&mut self, f: u32) -> Op {
        let h = &HOST_FUNCTIONS[f as usize];
        let mut args = [0u32; ARGS];
        let mut mask = 0u32;
        let mut slot = 0;
        let mut i = 0;
        while i < h.params.len() {
            let p = h.params[i];
            // Out, Out: where the host writes a pointer and a length.
            if p == Out && h.params.get(i + 1) == Some(&Out) && !self.rng.chance(self.hostile) {
                let j = 2 * self.rng.below(VALID_PAIRS);
                args[slot] = OUT + 4 * j;
                args[slot + 1] = OUT + 4 * (j + 1);
                slot += 2;
                i += 2;
                continue;
            }
            let (values, indirect_bits) = self.param(p, h.name, i);
            for (k, v) in values.iter().enumerate() {
                args[slot + k] = *v;
                if indirect_bits & (1 << k) != 0 {
                    mask |= 1 << (slot + k);
                }
            }
            slot += p.slots();
            i += 1;
        }
        Op { f, mask, args }
    }

    /// Values for one parameter and which of them are indirect.
    fn param(&mut self, p: P, name: &str, index: usize) -> (Vec<u32>, u32) {
        let valid = !self.rng.chance(self.hostile);
        if p.is_buf() {
            return self.buf(p, valid);
        }
        let rng = &mut *self.rng;
        let one = |v: u32| (vec![v], 0);
        match p {
            Out => {
                if valid {
                    one(OUT + 4 * rng.below(2 * VALID_PAIRS))
                } else {
                    match rng.below(4) {
                        // A pointer the host gave: it writes into its own data.
                        0 => (vec![indirect(rng.below(OUT_SLOTS), 0)], 1),
                        // Over the data the other arguments point into.
                        1 => one(DATA + rng.below(self.blob.used)),
                        _ => one(edge(rng)),
                    }
                }
            }
            Level => one(if valid { rng.below(6) } else { edge(rng) }),
            BufKind => one(if valid {
                rng.pick(&[0, 1, 4, 6, 7])
            } else {
                let e = edge(rng);
                rng.pick(&[2, 3, 5, 8, u32::MAX, e])
            }),
            MapKind => one(if valid {
                rng.pick(&[0, 0, 0, 1, 2, 2, 3, 6, 7])
            } else {
                let e = edge(rng);
                rng.pick(&[4, 5, 8, u32::MAX, 0x8000_0000, e])
            }),
            StreamKind => one(if valid { rng.below(2) } else { edge(rng) }),
            MetricKind => one(if valid { rng.below(3) } else { edge(rng) }),
            Tick => {
                let e = edge(rng);
                one(rng.pick(&[0, 1, 2, 10, 1000, u32::MAX, e]))
            }
            Context => one(if valid { rng.below(8) } else { edge(rng) }),
            Id => {
                if valid && rng.chance(50) {
                    // An id a define/register call wrote.
                    (vec![indirect(rng.below(2 * VALID_PAIRS), 0)], 1)
                } else if valid {
                    one(rng.below(24))
                } else {
                    one(edge(rng))
                }
            }
            I64 => {
                let v: i64 = match rng.below(6) {
                    0 => 0,
                    1 => 1,
                    2 => -1,
                    3 => i64::MAX,
                    4 => i64::MIN,
                    _ => i64::from(rng.u32() as i32),
                };
                (vec![v as u32, (v >> 32) as u32], 0)
            }
            // A CAS token: none, or one a get wrote.
            Num if name == "proxy_set_shared_data" && valid => match rng.below(10) {
                0..=5 => one(0),
                6..=8 => (vec![indirect(rng.below(2 * VALID_PAIRS), 0)], 1),
                _ => one(rng.below(300)),
            },
            // Statuses of a local response, timeouts, offsets, sizes.
            _ => {
                let v = if name == "proxy_send_local_response" && index == 0 && valid {
                    rng.pick(&[200, 404, 100, 999, 99, 1000, 0])
                } else if valid {
                    rng.below(300)
                } else {
                    edge(rng)
                };
                one(v)
            }
        }
    }

    fn buf(&mut self, p: P, valid: bool) -> (Vec<u32>, u32) {
        let rng = &mut *self.rng;
        let kind = match p {
            Key => "key",
            Value => "value",
            Path => "path",
            Name => "name",
            // Mostly the one upstream the caller knows.
            Upstream if valid && rng.chance(70) => "known-upstream",
            Upstream => "upstream",
            Map if valid => "map",
            Map => "bad-map",
            _ => "random",
        };
        let pair = |ptr: u32, len: u32| (vec![ptr, len], 0);
        if valid {
            if rng.chance(20) {
                // A pointer and a length an earlier call was given.
                let j = 2 * rng.below(VALID_PAIRS);
                return (vec![indirect(j, 0), indirect(j + 1, 0)], 0b11);
            }
            let list = if rng.chance(90) {
                self.blob.kind(kind)
            } else {
                &self.blob.all
            };
            let (ptr, len) = rng.pick(list);
            return match rng.below(10) {
                // Into the middle of valid data, or empty at its end.
                0 => {
                    let k = rng.below(len + 1);
                    pair(ptr + k, len - k)
                }
                1 => pair(ptr + len, 0),
                _ => pair(ptr, len),
            };
        }
        match rng.below(9) {
            // Blob data one byte too long or too short (still in memory, but
            // not what the call expects).
            0 => {
                let (ptr, len) = rng.pick(&self.blob.all);
                pair(
                    ptr,
                    if rng.chance(50) {
                        len + 1
                    } else {
                        len.saturating_sub(1)
                    },
                )
            }
            // Host-given words read as the wrong things, nudged.
            1 => {
                let j = rng.below(OUT_SLOTS - 1);
                let nudge = rng.pick(&[-1i16, 1, 8, -8, 0x7fff]);
                (vec![indirect(j, 0), indirect(j + 1, nudge)], 0b11)
            }
            2 => pair(edge(rng), rng.below(17)),
            // Valid start, huge length.
            3 => pair(DATA + rng.below(64), edge(rng)),
            // Exactly at the end of memory, and one byte past it.
            4 | 5 => {
                let len = 1 + rng.below(64);
                match rng.below(4) {
                    0 => pair(MEM - len, len),
                    1 => pair(MEM - len + 1, len),
                    2 => pair(MEM, 0),
                    _ => pair(MEM + 1, 0),
                }
            }
            // All of memory (rarely: shared data and metrics keep what they get).
            6 if rng.chance(20) => match rng.below(3) {
                0 => pair(0, MEM),
                1 => pair(0, MEM + 1),
                _ => pair(1, MEM - 1),
            },
            // Overlapping the out slots, or stale bytes in the allocator's arena.
            6 | 7 => pair(OUT + 4 * rng.below(8), 4 + rng.below(128)),
            _ => pair(HEAP + rng.below(4096), rng.below(512)),
        }
    }

    /// A host function to call; the stub that always fails is drawn less
    /// often, or few streams would get past it.
    fn function(&mut self) -> u32 {
        loop {
            let f = self.rng.below(HOST_FUNCTIONS.len() as u32);
            if HOST_FUNCTIONS[f as usize].returns_status || self.rng.chance(25) {
                return f;
            }
        }
    }

    fn script(&mut self, phase: u8, max_ops: u32) -> Script {
        self.hostile = self.rng.pick(&[0, 2, 5, 10, 25, 50]);
        let n = if self.rng.chance(15) {
            0
        } else {
            1 + self.rng.below(max_ops)
        };
        let ops: Vec<Op> = (0..n)
            .map(|_| {
                let f = self.function();
                self.op(f)
            })
            .collect();
        let calls_out = ops.iter().any(|op| op.f == host_fn("proxy_http_call"));
        let mut script = Script::new(ops);
        let pausable = matches!(
            phase,
            REQUEST_HEADERS | REQUEST_BODY | REQUEST_TRAILERS | RESPONSE_HEADERS | RESPONSE_BODY
        ) || phase == RESPONSE_TRAILERS;
        script.action = match self.rng.below(100) {
            _ if phase >= CONFIGURE => {
                // Mostly accept; sometimes refuse the configuration.
                if self.rng.chance(90) {
                    1
                } else {
                    0
                }
            }
            _ if !pausable => self.rng.below(2),
            // Pause for the answer to a call, as filters do.
            _ if calls_out && self.rng.chance(50) => 1,
            0..=79 => 0,
            80..=94 => 1,
            _ => edge(self.rng),
        };
        script.tick = self.rng.pick(&[0, 0, 0, 1, 2]);
        match self.rng.below(100) {
            0..=84 => {}
            85..=91 => {
                script.alloc_mode = 1;
                let e = edge(self.rng);
                script.alloc_value = self.rng.pick(&[0, MEM, MEM - 1, u32::MAX, e]);
            }
            _ => {
                script.alloc_mode = 2;
                script.max_depth = if self.rng.chance(95) {
                    1 + self.rng.below(3)
                } else {
                    // Unbounded: the guest re-enters until the host stops it.
                    100_000
                };
                script.reentrant = if script.max_depth > 3 {
                    // A call that always hands the guest bytes, so that
                    // every level allocates (and re-enters) again.
                    let (ptr, len) = self.blob.kind("plugin-name")[0];
                    OpBuilder::new("proxy_get_property")
                        .arg(ptr)
                        .arg(len)
                        .out(0)
                        .out(1)
                        .build()
                } else if self.rng.chance(60) {
                    let f = host_fn(self.rng.pick(GIVERS));
                    self.op(f)
                } else {
                    let f = self.function();
                    self.op(f)
                };
            }
        }
        script
    }
}

// ---------------------------------------------------------------------------
// Reports.

#[derive(Clone, Copy, Debug)]
struct Report {
    seq: u32,
    f: u32,
    status: u32,
    phase: u32,
    depth: u32,
}

fn report_prefix() -> Vec<u8> {
    let mut key = NONCE.to_le_bytes().to_vec();
    key.push(b'r');
    key
}

fn parse_report(key: &[u8], value: &[u8]) -> Report {
    assert_eq!(key.len(), 18, "report key {key:?}");
    assert_eq!(value.len(), 16, "report value {value:?}");
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    Report {
        seq: word(key, 13),
        f: word(value, 0),
        status: word(value, 4),
        phase: word(value, 8),
        depth: word(value, 12),
    }
}

/// Takes the reports the last callbacks left in the exchange's properties.
fn harvest(exchange: &mut HttpExchange, reports: &mut Vec<Report>) {
    let prefix = report_prefix();
    exchange.properties.retain(|key, value| {
        if key.starts_with(&prefix) {
            reports.push(parse_report(key, value));
            false
        } else {
            true
        }
    });
}

/// Reports of a root phase (configure, VM start), left in shared data under
/// `vm_id`; each is cleared once read (an empty value reads as absent).
fn harvest_root(vm_id: &str, phase: u8, reports: &mut Vec<Report>) {
    for seq in 1.. {
        let mut key = report_prefix();
        key.extend_from_slice(&(0xffff_0000 | u32::from(phase)).to_le_bytes());
        key.extend_from_slice(&(seq as u32).to_le_bytes());
        key.push(b'.');
        match shared().get(vm_id, &key) {
            Some((value, _)) if !value.is_empty() => {
                reports.push(parse_report(&key, &value));
                shared().set(vm_id, &key, Vec::new(), 0);
            }
            _ => break,
        }
    }
}

/// Property paths of scripts and reports end in `.`: the host drops one
/// trailing NUL from a path, which a phase or sequence number can end with.
fn script_path(phase: u8) -> Vec<u8> {
    let mut path = NONCE.to_le_bytes().to_vec();
    path.push(b's');
    path.push(phase);
    path.push(b'.');
    path
}

/// The scripts of a stream, for a failure message.
fn describe_scripts(exchange: &HttpExchange) -> String {
    let mut text = String::new();
    for phase in 0..=TICK {
        let Some(script) = exchange.properties.get(&script_path(phase)) else {
            continue;
        };
        let word = |at: usize| u32::from_le_bytes(script[at..at + 4].try_into().unwrap());
        let ops_at = HEADER as usize + word(24) as usize;
        let names: Vec<&str> = (0..word(0) as usize)
            .map(|i| HOST_FUNCTIONS[word(ops_at + i * OP_SIZE as usize) as usize].name)
            .collect();
        let _ = writeln!(
            text,
            "  {}: action {}, tick {}, allocator mode {} depth {}: {names:?}",
            callback_of(u32::from(phase)),
            word(4),
            word(8),
            word(12),
            word(20)
        );
    }
    text
}

/// Calls as reported, in order, for a failure message.
fn describe_reports(reports: &[Report]) -> String {
    let skipped = reports.len().saturating_sub(60);
    let shown = reports
        .iter()
        .take(30)
        .chain(reports.iter().skip(30.max(skipped)));
    let mut text = if skipped > 0 {
        format!("{} calls, the first and last 30: ", reports.len())
    } else {
        String::new()
    };
    text += &shown
        .map(|r| {
            let status = match r.status {
                STARTED => "never returned".to_string(),
                s => s.to_string(),
            };
            format!(
                "{}@{}:{}",
                HOST_FUNCTIONS[r.f as usize].name,
                callback_of(r.phase),
                status
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    text
}

// ---------------------------------------------------------------------------
// Bookkeeping.

#[derive(Default, Clone, Copy)]
struct Counts {
    calls: u64,
    ok: u64,
    other_status: u64,
    /// The call that failed the callback.
    failed: u64,
    /// Calls still in flight when a call they made (re-entrantly) failed.
    interrupted: u64,
}

#[derive(Default)]
struct Tally {
    per_function: Vec<Counts>,
    per_phase: [u64; PHASES],
    /// Clean failures by class.
    failures: BTreeMap<&'static str, u64>,
    streams: u64,
    probes: u64,
    root_plugins: u64,
    max_depth: u32,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            per_function: vec![Counts::default(); HOST_FUNCTIONS.len()],
            ..Tally::default()
        }
    }

    fn executions(&self) -> u64 {
        self.per_function.iter().map(|c| c.calls).sum()
    }

    /// Counts the calls of one stream (or root start-up) and checks how it
    /// ended: `failure` is the crash message, if it failed.
    fn account(&mut self, reports: &[Report], failure: Option<(&str, &str, bool)>) {
        self.count(reports, false, failure);
    }

    /// Counts the calls of a stream whose callback was interrupted at its
    /// deadline: whatever was in flight was cut short, not refused.
    fn account_interrupted(&mut self, reports: &[Report]) {
        self.count(reports, true, None);
        *self.failures.entry("callback deadline").or_default() += 1;
    }

    fn count(
        &mut self,
        reports: &[Report],
        interrupted: bool,
        failure: Option<(&str, &str, bool)>,
    ) {
        let started: Vec<&Report> = reports.iter().filter(|r| r.status == STARTED).collect();
        let failing = started
            .iter()
            .max_by_key(|r| r.depth)
            .copied()
            .filter(|_| !interrupted);
        for r in reports {
            assert!(
                (r.f as usize) < HOST_FUNCTIONS.len(),
                "report of unknown function {r:?}"
            );
            let c = &mut self.per_function[r.f as usize];
            c.calls += 1;
            self.per_phase[r.phase as usize] += 1;
            self.max_depth = self.max_depth.max(r.depth);
            if r.status == STARTED {
                if failing.is_some_and(|f| f.seq == r.seq) {
                    c.failed += 1;
                } else {
                    c.interrupted += 1;
                }
            } else if r.status == 0 {
                c.ok += 1;
            } else {
                assert!(
                    STATUSES.contains(&r.status),
                    "{} returned {}, which is not a Proxy-Wasm status",
                    HOST_FUNCTIONS[r.f as usize].name,
                    r.status
                );
                assert!(
                    HOST_FUNCTIONS[r.f as usize].returns_status,
                    "a call without a status returned"
                );
                c.other_status += 1;
            }
        }
        match (failure, failing) {
            (None, None) => {}
            (None, Some(r)) => panic!(
                "{} never returned, yet its callback succeeded: {reports:?}",
                HOST_FUNCTIONS[r.f as usize].name
            ),
            (Some((callback, message, _)), None) => panic!(
                "{callback} failed with no host call in flight (the harness broke?): {message}"
            ),
            (Some((callback, message, trap)), Some(r)) => {
                let class = classify(r, started.len(), callback, message, trap);
                *self.failures.entry(class).or_default() += 1;
            }
        }
    }
}

/// Checks that a failure is a clean error of the call that was in flight,
/// and names its class.
fn classify(
    failing: &Report,
    in_flight: usize,
    callback: &str,
    message: &str,
    trap: bool,
) -> &'static str {
    let name = HOST_FUNCTIONS[failing.f as usize].name;
    assert_eq!(
        callback,
        callback_of(failing.phase),
        "{name} failed in phase {} but the report names {callback}: {message}",
        failing.phase
    );
    let prefix = match name {
        "proxy_replace_header_map_value" | "proxy_add_header_map_value" => "header map edit",
        _ => name,
    };
    let decodes_maps = matches!(
        name,
        "proxy_set_header_map_pairs"
            | "proxy_send_local_response"
            | "proxy_http_call"
            | "proxy_grpc_call"
            | "proxy_grpc_stream"
    );
    // The guest never traps on its own (its loads stay in bounds), so a
    // trap would be the host's doing.
    assert!(!trap, "unexpected trap during {name}: {message}");
    if message.contains(&format!("{prefix}: guest range")) {
        "bad guest pointer or length"
    } else if message.contains(&format!("{prefix}: the guest could not allocate")) {
        "guest allocator returned null"
    } else if message.contains(&format!(
        "{prefix}: the guest's allocator re-entered the host"
    )) {
        assert!(
            in_flight > 1,
            "{name} refused a re-entry with nothing in flight"
        );
        "guest allocator re-entered the host too deep"
    } else if decodes_maps && message.contains("malformed header map") {
        "malformed header map"
    } else if STUBBED.contains(&name) && message.contains(&format!("{name} is not implemented")) {
        "unknown import without a status"
    } else {
        panic!("{name} failed with an unexpected error in {callback}: {message}")
    }
}

// ---------------------------------------------------------------------------
// The embedder side: an upstream for http calls, and a log sink.

#[derive(Debug)]
struct FuzzCaller;

impl HttpCaller for FuzzCaller {
    fn has_upstream(&self, upstream: &str) -> bool {
        upstream == "fuzz-upstream"
    }

    fn call(&self, request: HttpCallRequest) -> HttpCallFuture {
        Box::pin(async move {
            // Some calls fail, as a dead upstream would.
            if request.body.len() % 7 == 3 {
                return Err("refused by the fuzz upstream".into());
            }
            let path = request.headers.get(b":path").unwrap_or_default();
            Ok(HttpCallResponse {
                headers: pairs(&[(b":status", b"200"), (b"x-call-path", path)]),
                body: request.body,
                trailers: pairs(&[(b"x-call-trailer", b"t")]),
            })
        })
    }

    /// A gRPC stream's server: every piece the filter sends comes back, then
    /// status 0 once the filter ends its side.
    fn open_stream(&self, request: HttpStreamRequest) -> HttpStreamFuture {
        Box::pin(async move {
            Ok(HttpStreamResponse {
                headers: pairs(&[(b":status", b"200"), (b"content-type", b"application/grpc")]),
                body: Box::pin(EchoStream {
                    sent: request.body,
                    ended: false,
                }),
            })
        })
    }
}

struct EchoStream {
    sent: StreamBody,
    ended: bool,
}

impl futures_core::Stream for EchoStream {
    type Item = Result<StreamPart, String>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        match self.sent.poll_recv(cx) {
            Poll::Ready(Some(data)) => Poll::Ready(Some(Ok(StreamPart::Data(data)))),
            Poll::Ready(None) => {
                self.ended = true;
                let trailers = pairs(&[(b"grpc-status", b"0")]);
                Poll::Ready(Some(Ok(StreamPart::Trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

// ---------------------------------------------------------------------------
// Driving streams.

fn pairs(items: &[(&[u8], &[u8])]) -> Headers {
    Headers::from_pairs(
        items
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
    )
}

fn fuzz_exchange(rng: &mut Rng) -> Box<HttpExchange> {
    let body_len = rng.pick(&[0usize, 0, 1, 100, 4096, 20_000]);
    let mut request_headers = pairs(&[
        (b":method", b"POST"),
        (b":path", b"/fuzz?x=1"),
        (b":authority", b"fuzz.local"),
        (b":scheme", b"http"),
        (b"x-probe", b"fz"),
        (b"content-length", body_len.to_string().as_bytes()),
    ]);
    for _ in 0..rng.below(4) {
        let (name_len, value_len) = (1 + rng.below(12), rng.below(40));
        let name = rng.bytes(name_len as usize);
        let value = rng.bytes(value_len as usize);
        request_headers.add(&name, value);
    }
    let trailers = |rng: &mut Rng| {
        if rng.chance(30) {
            pairs(&[(b"grpc-status", b"0"), (b"x-t", b"1")])
        } else {
            Headers::default()
        }
    };
    Box::new(HttpExchange {
        request_headers,
        request_body: rng.bytes(body_len),
        request_trailers: trailers(rng),
        response_headers: pairs(&[
            (b":status", b"200"),
            (b"server", b"upstream"),
            (b"content-length", b"12"),
        ]),
        response_body: {
            let len = rng.pick(&[0usize, 12, 3000]);
            rng.bytes(len)
        },
        response_trailers: trailers(rng),
        info: request_info(),
        response_details: Some("via_upstream".into()),
        properties: BTreeMap::new(),
        local_response: None,
    })
}

fn request_info() -> RequestInfo {
    RequestInfo {
        id: 0x1234,
        protocol: "HTTP/1.1",
        start_time: Some(SystemTime::now()),
        source: Some(SocketAddr::from(([127, 0, 0, 1], 40000))),
        destination: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
        connection_id: 7,
        cluster: Some("fuzz-cluster".into()),
        tls: None,
        trace: Some(Box::new(wasmgate_proxy_wasm::TraceIds {
            trace_id: *b"0123456789abcdef",
            span_id: *b"01234567",
            sampled: true,
        })),
    }
}

/// How one stream ended.
enum End {
    Finished,
    /// A callback failed: (callback, message, whether it was a wasm trap).
    Crashed(String, String, bool),
    /// Paused with nothing that could resume it.
    Stalled,
    /// Kept paused past the host's limit.
    PausedTooLong,
    /// A callback ran past its deadline (the host interrupts wasm, never a
    /// host call; only a machine too busy to run 16 calls in 300 ms gets here).
    Deadline,
}

/// What a failed callback amounts to.
fn ended(error: FilterError) -> End {
    match error {
        FilterError::Crash(report) if report.kind.as_str() == "timeout" => End::Deadline,
        FilterError::Crash(report) => End::Crashed(
            report.function.clone(),
            report.message.clone(),
            report.kind.as_str() == "trap",
        ),
        FilterError::Stalled { .. } => End::Stalled,
        FilterError::PausedTooLong { .. } => End::PausedTooLong,
        FilterError::Unavailable { reason, .. } => {
            panic!("the plugin became unavailable: {reason}")
        }
    }
}

/// Runs one stream the way the gateway does, collecting the guest's reports.
async fn drive(
    plugin: &Arc<FilterPlugin>,
    exchange: &mut Box<HttpExchange>,
    reports: &mut Vec<Report>,
    split_body: bool,
) -> (End, Vec<Flow>) {
    let mut flows = Vec::new();
    let mut stream = plugin
        .stream()
        .await
        .unwrap_or_else(|e| panic!("a stream could not start: {e}"));
    macro_rules! step {
        ($call:expr) => {{
            let result = $call;
            harvest(exchange, reports);
            match result {
                Ok(flow) => {
                    flows.push(flow);
                    flow
                }
                Err(error) => return (ended(error), flows),
            }
        }};
    }
    let has_body = !exchange.request_body.is_empty();
    let has_trailers = !exchange.request_trailers.is_empty();
    let body = std::mem::take(&mut exchange.request_body);
    let mut settled = false;
    let flow = step!(
        stream
            .on_request_headers(exchange, !has_body && !has_trailers)
            .await
    );
    if matches!(flow, Flow::Respond | Flow::Close) {
        settled = true;
    }
    if !settled && has_body {
        let cut = if split_body {
            body.len() / 2
        } else {
            body.len()
        };
        exchange.request_body = body[..cut].to_vec();
        let mut last = cut == body.len();
        let mut flow = step!(
            stream
                .on_request_body(exchange, last && !has_trailers)
                .await
        );
        if !last && !matches!(flow, Flow::Respond | Flow::Close) {
            if flow == Flow::Buffer {
                exchange.request_body.extend_from_slice(&body[cut..]);
            } else {
                exchange.request_body = body[cut..].to_vec();
            }
            last = true;
            flow = step!(
                stream
                    .on_request_body(exchange, last && !has_trailers)
                    .await
            );
        }
        settled = matches!(flow, Flow::Respond | Flow::Close);
    }
    if !settled && has_trailers {
        let flow = step!(stream.on_request_trailers(exchange).await);
        settled = matches!(flow, Flow::Respond | Flow::Close);
    }
    if !settled {
        let has_body = !exchange.response_body.is_empty();
        let has_trailers = !exchange.response_trailers.is_empty();
        let flow = step!(
            stream
                .on_response_headers(exchange, !has_body && !has_trailers)
                .await
        );
        settled = matches!(flow, Flow::Respond | Flow::Close);
        if !settled && has_body {
            let flow = step!(stream.on_response_body(exchange, !has_trailers).await);
            settled = matches!(flow, Flow::Respond | Flow::Close);
        }
        if !settled && has_trailers {
            step!(stream.on_response_trailers(exchange).await);
        }
    }
    let result = stream.finish(exchange).await;
    harvest(exchange, reports);
    match result {
        Ok(()) => (End::Finished, flows),
        Err(error) => (ended(error), flows),
    }
}

// ---------------------------------------------------------------------------

#[test]
fn the_table_names_every_host_function() {
    // Every `"proxy_..."` string literal in host_env/ names a host function
    // (or is its error prefix); all must be in the table, so a new host
    // function fails this test until the fuzzer drives it too. Every file of
    // the directory is read, so a new section's file is not missed.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/host_env");
    let mut source = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            source += &std::fs::read_to_string(&path).unwrap();
        }
    }
    let mut linked: Vec<&str> = source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("proxy_") && s.bytes().all(|b| b == b'_' || b.is_ascii_lowercase())
        })
        .collect();
    linked.sort_unstable();
    linked.dedup();
    let mut table: Vec<&str> = HOST_FUNCTIONS
        .iter()
        .map(|h| h.name)
        .filter(|n| !STUBBED.contains(n))
        .collect();
    table.sort_unstable();
    assert_eq!(linked, table);
    assert_eq!(table.len(), 42);
}

// ---------------------------------------------------------------------------
// The probe: a well-formed request whose every effect is checked.

struct Probe {
    blob: Blob,
    metric: String,
    /// Scripts per phase, with and without an http call.
    with_call: Vec<(u8, Vec<u8>)>,
    without_call: Vec<(u8, Vec<u8>)>,
    /// Host calls each makes.
    calls_with: usize,
    calls_without: usize,
}

impl Probe {
    fn new(rng: &mut Rng) -> Probe {
        let mut b = Blob::default();
        let metric = format!("probe_counter_{:x}", rng.next_u64());
        let e = |b: &mut Blob, bytes: &[u8]| b.add("probe", bytes);
        let x_probe = e(&mut b, b"x-probe");
        let x_echo = e(&mut b, b"x-echo");
        let x_path = e(&mut b, b"x-path");
        let x_prop = e(&mut b, b"x-prop");
        let x_resp = e(&mut b, b"x-resp");
        let x_call = e(&mut b, b"x-call-status");
        let x_call_body = e(&mut b, b"x-call-body");
        let server = e(&mut b, b"server");
        let status = e(&mut b, b":status");
        let request_path = e(&mut b, b"request\0path");
        let prop_key = e(&mut b, b"probe\0key");
        let value = e(&mut b, b"probe-value");
        let new_body = e(&mut b, b"probe-body-replaced");
        let prefix = e(&mut b, b"prefix-");
        let upstream = e(&mut b, b"fuzz-upstream");
        let call_map = e(
            &mut b,
            &encode_map(&[
                (b":method", b"POST"),
                (b":path", b"/probe-call"),
                (b":authority", b"fuzz-upstream"),
            ]),
        );
        let empty_map = e(&mut b, &encode_map(&[]));
        let shared_key = e(&mut b, b"probe-shared");
        let metric_name = e(&mut b, metric.as_bytes());
        let blob = b.finish();

        let o = OpBuilder::new;
        let get_value = |map: u32, key, slot: u32| {
            o("proxy_get_header_map_value")
                .arg(map)
                .buf(key)
                .out(slot)
                .out(slot + 1)
                .build()
        };
        let add_from = |key, slot: u32| {
            o("proxy_add_header_map_value")
                .arg(0)
                .buf(key)
                .ind(slot, 0)
                .ind(slot + 1, 0)
                .build()
        };
        let mut request_headers = vec![
            get_value(0, x_probe, 0),
            add_from(x_echo, 0),
            o("proxy_get_property")
                .buf(request_path)
                .out(2)
                .out(3)
                .build(),
            add_from(x_path, 2),
            o("proxy_set_property").buf(prop_key).buf(value).build(),
            o("proxy_get_property").buf(prop_key).out(4).out(5).build(),
            add_from(x_prop, 4),
        ];
        let request_body = vec![
            o("proxy_get_buffer_bytes")
                .arg(0)
                .arg(0)
                .arg(1000)
                .out(0)
                .out(1)
                .build(),
            o("proxy_set_buffer_bytes")
                .arg(0)
                .arg(0)
                .arg(u32::MAX)
                .buf(new_body)
                .build(),
        ];
        let response_headers = vec![
            o("proxy_replace_header_map_value")
                .arg(2)
                .buf(x_resp)
                .buf(value)
                .build(),
            o("proxy_remove_header_map_value")
                .arg(2)
                .buf(server)
                .build(),
        ];
        let response_body = vec![o("proxy_set_buffer_bytes")
            .arg(1)
            .arg(0)
            .arg(0)
            .buf(prefix)
            .build()];
        let log = vec![
            get_value(0, x_probe, 0),
            o("proxy_set_shared_data")
                .buf(shared_key)
                .ind(0, 0)
                .ind(1, 0)
                .arg(0)
                .build(),
            o("proxy_define_metric")
                .arg(0)
                .buf(metric_name)
                .out(2)
                .build(),
            o("proxy_increment_metric").ind(2, 0).arg(1).arg(0).build(),
            o("proxy_get_metric").ind(2, 0).out(3).build(),
        ];
        let size = vec![o("proxy_get_header_map_size").arg(0).out(0).build()];
        let call_response = vec![
            get_value(6, status, 10),
            add_from(x_call, 10),
            o("proxy_get_buffer_bytes")
                .arg(4)
                .arg(0)
                .arg(1000)
                .out(12)
                .out(13)
                .build(),
            add_from(x_call_body, 12),
            o("proxy_continue_stream").arg(0).build(),
        ];
        let mut without = vec![
            (REQUEST_BODY, Script::new(request_body)),
            (RESPONSE_HEADERS, Script::new(response_headers)),
            (RESPONSE_BODY, Script::new(response_body)),
            (LOG, Script::new(log)),
            (DONE, Script::new(size.clone())),
            (DELETE, Script::new(size)),
        ];
        let calls = |scripts: &[(u8, Script)]| scripts.iter().map(|(_, s)| s.ops.len()).sum();
        let mut with = Vec::new();
        std::mem::swap(&mut with, &mut without);
        without = with
            .iter()
            .map(|(p, s)| (*p, Script::new(s.ops.clone())))
            .collect();
        without.push((REQUEST_HEADERS, Script::new(request_headers.clone())));
        request_headers.push(
            o("proxy_http_call")
                .buf(upstream)
                .buf(call_map)
                .buf(value)
                .buf(empty_map)
                .arg(5000)
                .out(6)
                .build(),
        );
        let mut paused = Script::new(request_headers);
        paused.action = 1;
        with.push((REQUEST_HEADERS, paused));
        with.push((CALL_RESPONSE, Script::new(call_response)));
        let (calls_with, calls_without) = (calls(&with), calls(&without));
        let encode = |scripts: Vec<(u8, Script)>| {
            scripts
                .into_iter()
                .map(|(phase, s)| (phase, s.encode(&blob)))
                .collect()
        };
        Probe {
            with_call: encode(with),
            without_call: encode(without),
            calls_with,
            calls_without,
            metric,
            blob,
        }
    }

    /// The probe's counter, as `plugin` defined it (metrics are per plugin).
    fn metric_value(&self, plugin: &str) -> i64 {
        shared()
            .metrics()
            .iter()
            .find(|m| m.plugin == plugin && m.name == self.metric)
            .map_or(0, |m| m.value)
    }

    /// Runs a well-formed request through `plugin` and checks all it did.
    async fn run(&self, plugin: &Arc<FilterPlugin>, vm_id: &str, with_call: bool, rng: &mut Rng) {
        let token = format!("token-{:016x}", rng.next_u64());
        let mut exchange = Box::new(HttpExchange {
            request_headers: pairs(&[
                (b":method", b"POST"),
                (b":path", b"/probe?x=1"),
                (b":authority", b"probe.local"),
                (b"x-probe", token.as_bytes()),
            ]),
            request_body: b"probe-request-body".to_vec(),
            response_headers: pairs(&[(b":status", b"200"), (b"server", b"upstream")]),
            response_body: b"probe-response".to_vec(),
            info: request_info(),
            ..HttpExchange::default()
        });
        let scripts = if with_call {
            &self.with_call
        } else {
            &self.without_call
        };
        for (phase, script) in scripts {
            exchange
                .properties
                .insert(script_path(*phase), script.clone());
        }
        let metric_before = self.metric_value(plugin.name());
        let mut reports = Vec::new();
        let (end, flows) = tokio::time::timeout(
            Duration::from_secs(30),
            drive(plugin, &mut exchange, &mut reports, false),
        )
        .await
        .expect("the probe hung");
        match end {
            End::Finished => {}
            End::Crashed(callback, message, _) => {
                panic!("the probe failed in {callback}: {message}")
            }
            End::Stalled => panic!("the probe stalled"),
            End::PausedTooLong => panic!("the probe paused too long"),
            End::Deadline => panic!("the probe ran past a callback deadline"),
        }
        assert!(flows.iter().all(|f| *f == Flow::Continue), "{flows:?}");
        let expected = if with_call {
            self.calls_with
        } else {
            self.calls_without
        };
        assert_eq!(reports.len(), expected, "probe calls: {reports:?}");
        for r in &reports {
            assert_eq!(
                r.status, 0,
                "probe call {} returned {}",
                HOST_FUNCTIONS[r.f as usize].name, r.status
            );
        }
        let header = |map: &Headers, name: &str| map.get(name.as_bytes()).map(<[u8]>::to_vec);
        let request = &exchange.request_headers;
        assert_eq!(header(request, "x-echo"), Some(token.clone().into_bytes()));
        assert_eq!(header(request, "x-path"), Some(b"/probe?x=1".to_vec()));
        assert_eq!(header(request, "x-prop"), Some(b"probe-value".to_vec()));
        if with_call {
            assert_eq!(header(request, "x-call-status"), Some(b"200".to_vec()));
            assert_eq!(
                header(request, "x-call-body"),
                Some(b"probe-value".to_vec())
            );
        }
        assert_eq!(exchange.request_body, b"probe-body-replaced");
        let response = &exchange.response_headers;
        assert_eq!(header(response, "x-resp"), Some(b"probe-value".to_vec()));
        assert_eq!(header(response, "server"), None);
        assert_eq!(exchange.response_body, b"prefix-probe-response");
        assert_eq!(
            shared().get(vm_id, b"probe-shared").map(|(v, _)| v),
            Some(token.into_bytes())
        );
        // Hostile scripts of this plugin may have set this counter anywhere
        // (an id is easy to guess), even to i64::MAX; the host's increment
        // wraps, so must this.
        assert_eq!(
            self.metric_value(plugin.name()),
            metric_before.wrapping_add(1)
        );
    }
}

/// Empties every shared queue, so a long run does not hoard what it enqueued.
/// Ids are handed out in order and never reused; the queues of a VM id
/// whose last plugin is gone leave a gap (at most `shared_queues` ids).
fn drain_queues() {
    use wasmgate_proxy_wasm::abi::Status;
    let (mut id, mut missing) = (1, 0);
    while missing < 64 {
        match shared().dequeue(id) {
            Ok(_) => {
                missing = 0;
                continue;
            }
            Err(Status::NotFound) => missing += 1,
            Err(_) => missing = 0,
        }
        id += 1;
    }
}

const DEFAULT_SEED: u64 = 0x5eed_0006;
/// Streams between two probes.
const BATCH: u64 = 50;
/// One iteration in this many fuzzes a plugin's start-up instead of a stream.
const ROOT_EVERY: u64 = 40;
const MAX_OPS: u32 = 16;
/// A stream or probe that takes longer has hung.
const HANG: Duration = Duration::from_secs(30);
const CALLBACK_DEADLINE: Duration = Duration::from_millis(300);

/// The shared-data store, queues and metrics are one per process, and hostile
/// scripts write to ids they guess, so a test that probes them must not run
/// beside another that runs hostile scripts (the probe's counter was once set
/// to i64::MAX by a concurrent test between its two reads). Held for a
/// whole test; a test that failed does not poison it for the others
/// (tokio's mutex: each test has its own runtime, and the guard is held across
/// awaits.)
async fn exclusive_store() -> tokio::sync::MutexGuard<'static, ()> {
    static STORE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    STORE.lock().await
}

#[tokio::test(flavor = "current_thread")]
async fn every_host_function_survives_hostile_calls() {
    let _store = exclusive_store().await;
    let _ = tracing::subscriber::set_global_default(LogSink);
    let seed = env_u64("WASMGATE_FUZZ_SEED", DEFAULT_SEED);
    let iterations = env_u64("WASMGATE_FUZZ_ITERS", 10_000);
    let time_cap = std::env::var("WASMGATE_FUZZ_SECS")
        .ok()
        .map(|s| Duration::from_secs_f64(s.trim().parse().expect("WASMGATE_FUZZ_SECS")));
    let mut rng = Rng(seed);
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let wat = guest_wat();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    assert_eq!(probe.blob.bytes.len(), blob.bytes.len());
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = |name: String, vm_id: &str| FilterConfig {
        name,
        route: "fuzz-route".into(),
        root_id: "fuzz-root-id".into(),
        vm_id: vm_id.into(),
        http_caller: Some(caller.clone()),
        // Also bounds a pause, at 10 deadlines: 3 s.
        timeout: Some(CALLBACK_DEADLINE),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, wat.as_bytes(), config("fuzz".into(), ""))
        .await
        .expect("the fuzz guest loads");
    // Start-ups report through VM id `fuzz-root`'s shared data, read once
    // the start-up is over, failed or not: a VM id's data goes with its
    // last plugin, so one stays loaded.
    let _fuzz_root = FilterPlugin::new(
        &runtime,
        wat.as_bytes(),
        config("fuzz-root-keeper".into(), "fuzz-root"),
    )
    .await
    .expect("the fuzz guest loads");
    probe.run(&plugin, "", true, &mut rng).await;

    let mut tally = Tally::new();
    let started = Instant::now();
    let mut done = 0;
    while done < iterations && time_cap.is_none_or(|cap| started.elapsed() < cap) {
        done += 1;
        if done % ROOT_EVERY == 0 {
            // Start-up: hostile calls in proxy_on_vm_start and proxy_on_configure.
            let mut gen = Generator {
                rng: &mut rng,
                blob: &blob,
                hostile: 0,
            };
            let configure = gen.script(CONFIGURE, MAX_OPS);
            let vm_start = gen.script(VM_START, MAX_OPS);
            let refused = configure.action == 0 || vm_start.action == 0;
            let mut c = config(format!("fuzz-root-{done}"), "fuzz-root");
            c.plugin_configuration = configure.encode(&blob);
            c.vm_configuration = vm_start.encode(&blob);
            let result = tokio::time::timeout(HANG, FilterPlugin::new(&runtime, wat.as_bytes(), c))
                .await
                .expect("plugin start-up hung");
            let mut reports = Vec::new();
            harvest_root("fuzz-root", VM_START, &mut reports);
            harvest_root("fuzz-root", CONFIGURE, &mut reports);
            tally.root_plugins += 1;
            match result {
                Ok(root_plugin) => {
                    tally.account(&reports, None);
                    probe.run(&root_plugin, "fuzz-root", false, &mut rng).await;
                    tally.probes += 1;
                }
                Err(error) => {
                    let message = format!("{error:#}");
                    let failing = reports
                        .iter()
                        .filter(|r| r.status == STARTED)
                        .max_by_key(|r| r.depth);
                    match failing {
                        Some(r) => {
                            let trap = message.contains("failed (trap)");
                            tally.account(&reports, Some((callback_of(r.phase), &message, trap)));
                        }
                        None => {
                            assert!(
                                refused && message.contains("returned false"),
                                "start-up failed with no host call in flight: {message}"
                            );
                            tally.account(&reports, None);
                            *tally.failures.entry("start-up refused").or_default() += 1;
                        }
                    }
                }
            }
            continue;
        }

        // A stream with a script in most phases. The tick phase always has
        // one: it resumes a paused stream, so ticks cannot spin forever.
        let before = plugin.status();
        let mut exchange = fuzz_exchange(&mut rng);
        let split_body = rng.chance(30);
        let mut gen = Generator {
            rng: &mut rng,
            blob: &blob,
            hostile: 0,
        };
        for phase in 0..=TICK {
            if phase == TICK || gen.rng.chance(80) {
                let script = gen.script(phase, MAX_OPS);
                exchange
                    .properties
                    .insert(script_path(phase), script.encode(&blob));
            }
        }
        let mut reports = Vec::new();
        let driven = tokio::time::timeout(
            HANG,
            drive(&plugin, &mut exchange, &mut reports, split_body),
        )
        .await;
        let Ok((end, _)) = driven else {
            harvest(&mut exchange, &mut reports);
            panic!(
                "stream {done} hung (seed {seed:#x})\n{}calls: {}",
                describe_scripts(&exchange),
                describe_reports(&reports)
            );
        };
        tally.streams += 1;
        let failed = match &end {
            End::Finished => {
                tally.account(&reports, None);
                false
            }
            End::Crashed(callback, message, trap) => {
                tally.account(&reports, Some((callback, message, *trap)));
                true
            }
            End::Stalled => {
                tally.account(&reports, None);
                *tally
                    .failures
                    .entry("stream paused with nothing to resume it")
                    .or_default() += 1;
                true
            }
            End::PausedTooLong => {
                tally.account(&reports, None);
                *tally
                    .failures
                    .entry("stream kept paused past the host's limit")
                    .or_default() += 1;
                true
            }
            End::Deadline => {
                tally.account_interrupted(&reports);
                true
            }
        };
        // A failed stream's instance is dropped, never pooled again; the next
        // stream gets a new one.
        let after = plugin.status();
        assert_eq!(after.in_use, 0);
        assert_eq!(after.discarded, before.discarded + u64::from(failed));
        assert_eq!(after.created, before.created + u64::from(before.idle == 0));
        assert_eq!(after.created - after.discarded, after.idle as u64);

        if done % BATCH == 0 {
            probe.run(&plugin, "", rng.chance(50), &mut rng).await;
            tally.probes += 1;
            drain_queues();
        }
    }
    probe.run(&plugin, "", true, &mut rng).await;
    tally.probes += 1;
    let elapsed = started.elapsed();

    let executions = tally.executions();
    // Host functions proper: the two unknown imports are the host's stubs.
    let exercised = HOST_FUNCTIONS
        .iter()
        .zip(&tally.per_function)
        .filter(|(h, c)| c.calls > 0 && !STUBBED.contains(&h.name))
        .count();
    println!(
        "proxy-wasm host functions: seed {seed:#x}, {} streams, {} start-ups, {} probes, {executions} hostile calls in {:.1} s",
        tally.streams,
        tally.root_plugins,
        tally.probes,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>8} {:>11}",
        "function", "calls", "ok", "status", "failed", "interrupted"
    );
    for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
        println!(
            "{:<38} {:>9} {:>9} {:>9} {:>8} {:>11}",
            h.name, c.calls, c.ok, c.other_status, c.failed, c.interrupted
        );
    }
    println!("calls per phase: {:?}", tally.per_phase);
    println!("deepest re-entry: {}", tally.max_depth);
    println!("clean failures: {:?}", tally.failures);
    println!("plugin log events formatted: {}", LogSink::events());
    println!(
        "R6 proxy-wasm: executions={executions} functions={exercised} stubs={} streams={} seconds={:.1} seed={seed:#x} crashes=0",
        STUBBED.len(),
        tally.streams + tally.root_plugins,
        elapsed.as_secs_f64()
    );
    if done >= 1000 {
        for (h, c) in HOST_FUNCTIONS.iter().zip(&tally.per_function) {
            assert!(c.calls > 0, "{} was never called", h.name);
            if h.returns_status {
                assert!(
                    c.ok + c.other_status > 0,
                    "{} never returned normally",
                    h.name
                );
            } else {
                assert_eq!(c.failed + c.interrupted, c.calls, "{} returned", h.name);
            }
        }
    }
}

/// Regression: a guest whose allocator calls back into the host, which
/// calls its allocator again, without end. Each level took a fiber stack:
/// with the pooling allocator the guest held all 1000 of the engine's stacks
/// ("maximum concurrent limit of 1000 for fibers reached"), without it it
/// mapped 32,731 stacks until the process had no memory mappings left
/// (ENOMEM, 175 MB resident). The host now refuses the fifth nested
/// allocation; the callback fails cleanly, the instance is replaced and the
/// next request is served. A bounded re-entry (3 levels) still works.
#[tokio::test(flavor = "current_thread")]
async fn an_allocator_that_reenters_the_host_is_stopped() {
    let _store = exclusive_store().await;
    for pooling in [true, false] {
        reentry(pooling).await;
    }
}

async fn reentry(pooling: bool) {
    let mut rng = Rng(DEFAULT_SEED);
    let runtime = Runtime::new(RuntimeConfig {
        pooling,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = FilterConfig {
        name: "reentry".into(),
        vm_id: "reentry".into(),
        http_caller: Some(caller),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, guest_wat().as_bytes(), config)
        .await
        .unwrap();
    let (ptr, len) = blob.kind("plugin-name")[0];
    let get_name = OpBuilder::new("proxy_get_property")
        .arg(ptr)
        .arg(len)
        .out(0)
        .out(1)
        .build();
    for max_depth in [3, 100_000] {
        let mut script = Script::new(vec![get_name]);
        script.alloc_mode = 2;
        script.max_depth = max_depth;
        script.reentrant = get_name;
        let mut exchange = fuzz_exchange(&mut rng);
        exchange
            .properties
            .insert(script_path(REQUEST_HEADERS), script.encode(&blob));
        let mut reports = Vec::new();
        let started = Instant::now();
        let (end, _) =
            tokio::time::timeout(HANG, drive(&plugin, &mut exchange, &mut reports, false))
                .await
                .expect("re-entry hung");
        let deepest = reports.iter().map(|r| r.depth).max().unwrap();
        match (max_depth, end) {
            (3, End::Finished) => {
                assert_eq!(deepest, 3);
                assert!(reports.iter().all(|r| r.status == 0), "{reports:?}");
            }
            (100_000, End::Crashed(callback, message, trap)) => {
                assert_eq!(callback, "proxy_on_request_headers");
                assert!(
                    message.contains(
                        "proxy_get_property: the guest's allocator re-entered the host 4 calls deep"
                    ),
                    "{message}"
                );
                assert_eq!(deepest, 4);
                assert!(started.elapsed() < Duration::from_secs(1));
                let mut tally = Tally::new();
                tally.account(&reports, Some((&callback, &message, trap)));
            }
            (_, End::Crashed(_, message, _)) => panic!("depth {max_depth}: {message}"),
            (_, _) => panic!("depth {max_depth}: ended without the expected outcome"),
        }
        probe.run(&plugin, "reentry", true, &mut rng).await;
    }
    assert_eq!(plugin.status().discarded, 1);
}

/// Regression: a filter that pauses for an http call and answers each
/// response with another call, never resuming. The stream waited forever,
/// holding the request and its instance (found by the fuzzer, seed
/// 0x6b041411); now the pause ends at 10 callback deadlines with
/// `PausedTooLong`, the instance is replaced, and the next request is served.
#[tokio::test(flavor = "current_thread")]
async fn a_stream_kept_paused_by_endless_calls_ends() {
    let _store = exclusive_store().await;
    let mut rng = Rng(DEFAULT_SEED);
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let blob = fuzz_blob(&mut rng);
    let probe = Probe::new(&mut rng);
    let caller: Arc<dyn HttpCaller> = Arc::new(FuzzCaller);
    let config = FilterConfig {
        name: "endless-calls".into(),
        vm_id: "endless-calls".into(),
        http_caller: Some(caller),
        timeout: Some(Duration::from_millis(50)),
        ..FilterConfig::default()
    };
    let plugin = FilterPlugin::new(&runtime, guest_wat().as_bytes(), config)
        .await
        .unwrap();
    let call = OpBuilder::new("proxy_http_call")
        .buf(blob.kind("known-upstream")[0])
        .buf(blob.kind("map")[0])
        .buf((DATA, 0))
        .buf((DATA, 0))
        .arg(1000)
        .out(0)
        .build();
    let mut headers = Script::new(vec![call]);
    headers.action = 1;
    let mut exchange = fuzz_exchange(&mut rng);
    exchange.request_body.clear();
    exchange.request_trailers = Headers::default();
    for (phase, script) in [
        (REQUEST_HEADERS, headers),
        (CALL_RESPONSE, Script::new(vec![call])),
    ] {
        exchange
            .properties
            .insert(script_path(phase), script.encode(&blob));
    }
    let mut reports = Vec::new();
    let started = Instant::now();
    let (end, _) = tokio::time::timeout(
        Duration::from_secs(10),
        drive(&plugin, &mut exchange, &mut reports, false),
    )
    .await
    .expect("the stream stayed paused");
    assert!(matches!(end, End::PausedTooLong));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let calls = reports
        .iter()
        .filter(|r| r.phase == u32::from(CALL_RESPONSE))
        .count();
    assert!(calls > 10, "only {calls} calls were answered");
    assert!(reports.iter().all(|r| r.status == 0), "{reports:?}");
    assert_eq!(plugin.status().discarded, 1);
    probe.run(&plugin, "endless-calls", true, &mut rng).await;
}
