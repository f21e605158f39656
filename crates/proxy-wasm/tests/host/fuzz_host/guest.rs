//! The guest: one hand-written module, generated from the table of host
//! functions, that imports them all and interprets the scripts; its memory
//! layout and phases.

use std::fmt::Write as _;

use super::host_fns::{host_fn, HOST_FUNCTIONS, P};

/// One page less than would make `MEM` a round hostile number on its own.
const PAGES: u32 = 2;
pub(super) const MEM: u32 = PAGES * 65536;
/// Harness scratch: report keys and script paths.
const PATH: u32 = 0x100;
/// Harness scratch: report values.
const VALUE: u32 = 0x140;
/// Where the harness's own `proxy_get_property` writes pointer and length.
const SLOT: u32 = 0x180;
/// Out-parameter slots (4 bytes each) for the calls under test.
pub(super) const OUT: u32 = 0x200;
pub(super) const OUT_SLOTS: u32 = 64;
/// The script's data blob is copied here at the start of each phase.
pub(super) const DATA: u32 = 0x1000;
pub(super) const DATA_MAX: u32 = 0x3000;
/// The guest allocator's arena (wraps around).
pub(super) const HEAP: u32 = 0x4000;
pub(super) const HEADER: u32 = 96;
pub(super) const OP_SIZE: u32 = 56;
pub(super) const ARGS: usize = 12;
/// Report status of a call that has started and not returned.
pub(super) const STARTED: u32 = u32::MAX;
/// In report keys and script paths; never in guest memory for longer than
/// one harness call.
pub(super) const NONCE: u64 = 0x5eed_f022_a7e5_0006;

/// Phases, as the guest numbers them.
pub(super) const REQUEST_HEADERS: u8 = 0;
pub(super) const REQUEST_BODY: u8 = 1;
pub(super) const REQUEST_TRAILERS: u8 = 2;
pub(super) const RESPONSE_HEADERS: u8 = 3;
pub(super) const RESPONSE_BODY: u8 = 4;
pub(super) const RESPONSE_TRAILERS: u8 = 5;
pub(super) const LOG: u8 = 6;
pub(super) const DONE: u8 = 7;
pub(super) const DELETE: u8 = 8;
pub(super) const CALL_RESPONSE: u8 = 9;
pub(super) const TICK: u8 = 10;
pub(super) const CONFIGURE: u8 = 11;
pub(super) const VM_START: u8 = 12;
pub(super) const PHASES: usize = 13;

/// The callback whose crash report a failure in `phase` produces.
pub(super) fn callback_of(phase: u32) -> &'static str {
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

pub(super) fn guest_wat() -> String {
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
