//! The script guest: one hand-written module that imports every function of
//! `extism:host/env` and interprets a script of host calls it gets as its
//! input, reporting each call, before and after, through a host function of
//! the test's (`extism:host/user::fuzz_report`). The fuzz test (R6,
//! `fuzz_host.rs`) feeds it hostile scripts; the differential test
//! (`reference_sequences.rs`) runs the same scripts on wasmgate and on the
//! reference runtime (`reference/extism-ref`'s `script` mode, which registers
//! the same report function) and compares the reports call by call.
//!
//! The guest copies the script into its own linear memory first (no Extism
//! function can write there, so no call under test can change the script).
//! A script is: `n_ops, return code, data length, 0` (u32 each), the data
//! (bytes the script's blocks are made of), then ops of 40 bytes:
//! `f, destination register, argument a, argument b`, an argument being
//! `(mode, register, value)`: mode 1 adds the register's value. `f` indexes
//! [`HOST_FUNCTIONS`], or is [`NEW_BLOCK`].
//!
//! Reports are `(seq, f, phase, result)`: phase 0 before a call under test,
//! 1 after it (with its result), and 2 for a [`NEW_BLOCK`] (seq 0, result
//! the new block's handle).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use wasmgate_extism::HostFunction;
use wasmtime::{Val, ValType};

// ---------------------------------------------------------------------------
// The functions and the roles of their parameters.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum P {
    /// An offset into Extism memory (a block handle, or any byte).
    Handle,
    Len,
    /// An offset into the input.
    InputAt,
    /// A byte (`store_u8`'s value, an i32).
    Byte,
    /// A word (`store_u64`'s value).
    Word,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum R {
    None,
    I32,
    I64,
}

pub struct HostFn {
    pub name: &'static str,
    pub params: &'static [P],
    pub result: R,
}

pub const fn f(name: &'static str, params: &'static [P], result: R) -> HostFn {
    HostFn {
        name,
        params,
        result,
    }
}

use P::*;

/// Every function of `extism:host/env` (checked against the host's list by
/// `the_table_names_every_host_function`).
pub const HOST_FUNCTIONS: &[HostFn] = &[
    f("alloc", &[Len], R::I64),
    f("free", &[Handle], R::None),
    f("length", &[Handle], R::I64),
    f("length_unsafe", &[Handle], R::I64),
    f("load_u8", &[Handle], R::I32),
    f("load_u64", &[Handle], R::I64),
    f("store_u8", &[Handle, Byte], R::None),
    f("store_u64", &[Handle, Word], R::None),
    f("input_length", &[], R::I64),
    f("input_offset", &[], R::I64),
    f("input_load_u8", &[InputAt], R::I32),
    f("input_load_u64", &[InputAt], R::I64),
    f("input_set", &[Handle, Len], R::None),
    f("output_set", &[Handle, Len], R::None),
    f("output_length", &[], R::I64),
    f("output_offset", &[], R::I64),
    f("error_set", &[Handle], R::None),
    f("error_get", &[], R::I64),
    f("reset", &[], R::None),
    f("memory_bytes", &[], R::I64),
    f("config_get", &[Handle], R::I64),
    f("var_get", &[Handle], R::I64),
    f("var_set", &[Handle, Handle], R::None),
    f("http_request", &[Handle, Handle], R::I64),
    f("http_status_code", &[], R::I32),
    f("http_headers", &[], R::I64),
    f("log_trace", &[Handle], R::None),
    f("log_debug", &[Handle], R::None),
    f("log_info", &[Handle], R::None),
    f("log_warn", &[Handle], R::None),
    f("log_error", &[Handle], R::None),
    f("get_log_level", &[], R::I32),
];

pub fn host_fn(name: &str) -> u32 {
    HOST_FUNCTIONS
        .iter()
        .position(|h| h.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the table")) as u32
}

// ---------------------------------------------------------------------------
// The guest.

pub const PAGES: u32 = 2;
/// Registers: 16 i64 values (handles and results the calls share).
pub const REGS: u32 = 0x100;
/// The script, copied from the input.
pub const SCRIPT: u32 = 0x1000;
pub const SCRIPT_MAX: u32 = PAGES * 65536 - SCRIPT;
pub const HEADER: u32 = 16;
pub const OP_SIZE: u32 = 40;
/// Op code of "copy `len` bytes at `offset` of the script's data into a new
/// block": harness, not a call under test (it uses alloc and store_u8; its
/// handle is reported with phase 2).
pub const NEW_BLOCK: u32 = 100;

pub fn guest_wat() -> String {
    let mut imports = String::new();
    let mut cases = String::new();
    for (i, h) in HOST_FUNCTIONS.iter().enumerate() {
        let params: Vec<&str> = h
            .params
            .iter()
            .map(|p| if *p == Byte { "i32" } else { "i64" })
            .collect();
        let result = match h.result {
            R::None => "",
            R::I32 => "(result i32)",
            R::I64 => "(result i64)",
        };
        writeln!(
            imports,
            r#"  (import "extism:host/env" "{}" (func $h{i} (param {}) {result}))"#,
            h.name,
            params.join(" ")
        )
        .unwrap();
        writeln!(cases, "    end ;; case {i}").unwrap();
        for (k, p) in h.params.iter().enumerate() {
            let local = if k == 0 { "$a" } else { "$b" };
            if *p == Byte {
                writeln!(cases, "    local.get {local} i32.wrap_i64").unwrap();
            } else {
                writeln!(cases, "    local.get {local}").unwrap();
            }
        }
        writeln!(cases, "    call $h{i}").unwrap();
        match h.result {
            R::None => writeln!(cases, "    i64.const 0").unwrap(),
            R::I32 => writeln!(cases, "    i64.extend_i32_s").unwrap(),
            R::I64 => {}
        }
        writeln!(cases, "    return").unwrap();
    }
    let n = HOST_FUNCTIONS.len();
    let blocks: String = (0..=n).map(|_| "    block\n").collect();
    let table: String = (0..=n).map(|i| format!(" {i}")).collect();
    let alloc = host_fn("alloc");
    let store_u8 = host_fn("store_u8");
    let input_length = host_fn("input_length");
    let input_load_u64 = host_fn("input_load_u64");
    format!(
        r#"(module
{imports}
  (import "extism:host/user" "fuzz_report" (func $report (param i64 i64 i64 i64)))
  (memory (export "memory") {PAGES})
  (global $seq (mut i64) (i64.const 0))

  (func $dispatch (param $f i32) (param $a i64) (param $b i64) (result i64)
{blocks}    local.get $f
    br_table{table}
{cases}    end ;; default
    unreachable)

  (func $reg (param $r i32) (result i32)
    (i32.add (i32.const {REGS}) (i32.shl (i32.and (local.get $r) (i32.const 15)) (i32.const 3))))

  ;; An argument at `at`: (mode, register, value); mode 1 adds the register.
  (func $arg (param $at i32) (result i64)
    (if (result i64) (i32.eq (i32.load (local.get $at)) (i32.const 1))
      (then (i64.add (i64.load (call $reg (i32.load offset=4 (local.get $at))))
                     (i64.load offset=8 (local.get $at))))
      (else (i64.load offset=8 (local.get $at)))))

  ;; Script: n_ops, return code, data length, -, data, then ops of
  ;; (f, destination register, argument a, argument b).
  (func (export "run") (result i32)
    (local $n i64) (local $i i64) (local $k i32) (local $op i32) (local $ops i32)
    (local $f i32) (local $a i64) (local $b i64) (local $h i64) (local $r i64) (local $seq i64)
    (local.set $n (call $h{input_length}))
    (if (i64.gt_u (local.get $n) (i64.const {SCRIPT_MAX})) (then unreachable))
    (block $copied (loop $copy
      (br_if $copied (i64.ge_u (local.get $i) (local.get $n)))
      (i64.store (i32.add (i32.const {SCRIPT}) (i32.wrap_i64 (local.get $i)))
        (call $h{input_load_u64} (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 8)))
      (br $copy)))
    (local.set $ops (i32.add (i32.const {SCRIPT_OPS}) (i32.load (i32.const {SCRIPT_DATA_LEN}))))
    (local.set $k (i32.const 0))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $k) (i32.load (i32.const {SCRIPT}))))
      (local.set $op (i32.add (local.get $ops) (i32.mul (local.get $k) (i32.const {OP_SIZE}))))
      (local.set $f (i32.load (local.get $op)))
      (local.set $a (call $arg (i32.add (local.get $op) (i32.const 8))))
      (local.set $b (call $arg (i32.add (local.get $op) (i32.const 24))))
      (if (i32.eq (local.get $f) (i32.const {NEW_BLOCK}))
        (then
          (local.set $h (call $h{alloc} (local.get $b)))
          (if (i64.ne (local.get $h) (i64.const 0))
            (then
              (local.set $i (i64.const 0))
              (block $filled (loop $fill
                (br_if $filled (i64.ge_u (local.get $i) (local.get $b)))
                (call $h{store_u8} (i64.add (local.get $h) (local.get $i))
                  (i32.load8_u (i32.add (i32.const {SCRIPT_OPS})
                    (i32.wrap_i64 (i64.add (local.get $a) (local.get $i))))))
                (local.set $i (i64.add (local.get $i) (i64.const 1)))
                (br $fill)))))
          (call $report (i64.const 0) (i64.const {NEW_BLOCK}) (i64.const 2) (local.get $h))
          (local.set $r (local.get $h)))
        (else
          (global.set $seq (i64.add (global.get $seq) (i64.const 1)))
          (local.set $seq (global.get $seq))
          (call $report (local.get $seq) (i64.extend_i32_u (local.get $f)) (i64.const 0) (i64.const 0))
          (local.set $r (call $dispatch (local.get $f) (local.get $a) (local.get $b)))
          (call $report (local.get $seq) (i64.extend_i32_u (local.get $f)) (i64.const 1) (local.get $r))))
      (i64.store (call $reg (i32.load offset=4 (local.get $op))) (local.get $r))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br $next)))
    (i32.load offset=4 (i32.const {SCRIPT})))
)"#,
        SCRIPT_OPS = SCRIPT + HEADER,
        SCRIPT_DATA_LEN = SCRIPT + 8,
    )
}

// ---------------------------------------------------------------------------
// Randomness: SplitMix64, seeded, so a failing run can be replayed.

pub use wasmgate_testkit::fuzz::Rng;

// ---------------------------------------------------------------------------
// Scripts.

/// Bytes the script's new blocks are made of: keys, values, JSON requests.
pub struct Data {
    pub bytes: Vec<u8>,
    pub entries: BTreeMap<&'static str, Vec<(u32, u32)>>,
}

impl Data {
    pub fn new() -> Data {
        Data {
            bytes: Vec::new(),
            entries: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, kind: &'static str, bytes: &[u8]) {
        let entry = (self.bytes.len() as u32, bytes.len() as u32);
        self.bytes.extend_from_slice(bytes);
        self.entries.entry(kind).or_default().push(entry);
    }
}
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Arg {
    /// 1: add register `reg` to `value`.
    pub mode: u32,
    pub reg: u32,
    pub value: u64,
}

pub fn lit(value: u64) -> Arg {
    Arg {
        mode: 0,
        reg: 0,
        value,
    }
}

pub fn reg(reg: u32, offset: u64) -> Arg {
    Arg {
        mode: 1,
        reg,
        value: offset,
    }
}

#[derive(Clone, Copy)]
pub struct Op {
    pub f: u32,
    pub dest: u32,
    pub a: Arg,
    pub b: Arg,
}

pub struct Script {
    pub ops: Vec<Op>,
    pub code: i32,
}

impl Script {
    pub fn encode(&self, data: &Data) -> Vec<u8> {
        let mut out = Vec::new();
        let word = |out: &mut Vec<u8>, w: u32| out.extend_from_slice(&w.to_le_bytes());
        word(&mut out, self.ops.len() as u32);
        word(&mut out, self.code as u32);
        word(&mut out, data.bytes.len() as u32);
        word(&mut out, 0);
        out.extend_from_slice(&data.bytes);
        for op in &self.ops {
            word(&mut out, op.f);
            word(&mut out, op.dest);
            for arg in [op.a, op.b] {
                word(&mut out, arg.mode);
                word(&mut out, arg.reg);
                out.extend_from_slice(&arg.value.to_le_bytes());
            }
        }
        // The guest copies the input 8 bytes at a time.
        out.resize(out.len().div_ceil(8) * 8, 0);
        assert!(out.len() <= SCRIPT_MAX as usize);
        out
    }
}

// ---------------------------------------------------------------------------
// Reports and bookkeeping.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    pub seq: u64,
    pub f: u64,
    /// 0 before a call, 1 after it, 2 for a block the harness made.
    pub phase: u8,
    pub result: i64,
}

impl Report {
    /// The call under test returned (and `result` is what it returned).
    pub fn finished(&self) -> bool {
        self.phase == 1
    }

    /// A report of a call under test (not of a block the harness made).
    pub fn is_call(&self) -> bool {
        self.phase != 2
    }
}

pub type Reports = Arc<Mutex<Vec<Report>>>;

/// `extism:host/user::fuzz_report`, collecting into `reports`.
pub fn report_function(reports: Reports) -> HostFunction {
    HostFunction::new(
        "fuzz_report",
        [ValType::I64, ValType::I64, ValType::I64, ValType::I64],
        [],
        move |_, args: &[Val], _| {
            let get = |i: usize| args[i].unwrap_i64();
            reports.lock().unwrap().push(Report {
                seq: get(0) as u64,
                f: get(1) as u64,
                phase: get(2) as u8,
                result: get(3),
            });
            Ok(())
        },
    )
}

/// A script of valid calls only: blocks made from `data`, and `ops`.
pub fn probe_script(blocks: &[&[u8]], ops: Vec<Op>) -> Vec<u8> {
    let mut data = Data {
        bytes: Vec::new(),
        entries: BTreeMap::new(),
    };
    let mut all = Vec::new();
    for (dest, bytes) in blocks.iter().enumerate() {
        all.push(Op {
            f: NEW_BLOCK,
            dest: dest as u32,
            a: lit(data.bytes.len() as u64),
            b: lit(bytes.len() as u64),
        });
        data.add("probe", bytes);
    }
    all.extend(ops);
    Script { ops: all, code: 0 }.encode(&data)
}

pub fn call_op(name: &str, dest: u32, a: Arg, b: Arg) -> Op {
    Op {
        f: host_fn(name),
        dest,
        a,
        b,
    }
}
