//! Differential test of the Extism host ABI's edge semantics: generated
//! sequences of `extism:host/env` calls run on wasmgate and on the reference
//! runtime (the official `extism` crate 1.30.0 in `reference/extism-ref`,
//! built by `make reference`), compared call by call.
//!
//! Both run the script guest (`host/common/script_guest.rs`), which reports every
//! call and its result through `extism:host/user::fuzz_report`; the reference
//! binary's `script` mode registers the same function and prints the reports,
//! the guest's log lines and the outcome as JSON. The sequences include the
//! edges: the null handle (0, and `alloc(0)`), freed handles, interior
//! pointers, out-of-range offsets, reads past the input, `output_set` and
//! `input_set` on odd pointers, `error_set` on freed blocks, `reset`, keys
//! that are not UTF-8, full and disabled vars, and HTTP requests (to a server
//! in the test).
//!
//! What is compared, per call: whether it returned, and what it returned.
//! Handles differ between the runtimes (the reference keeps 12-byte block
//! headers in its memory, wasmgate on the host), so a handle is compared by
//! what it names: null, a new block, the same block as the k-th handle seen,
//! or an offset into it. Values read from memory are compared exactly; the
//! generator reads and writes only inside blocks, or far outside the memory
//! (below 57 or past 4 GiB), since what lies between blocks is each
//! runtime's own. Sequences stay small (a few KiB of Extism memory), so
//! that neither runtime reaches the point where it reuses freed blocks
//! (which depends on how full each one's memory is). Per sequence, the
//! outcome (output, the plugin's error, the return code, or which call failed
//! and with what message) and the log lines must match too.
//!
//! `WASMGATE_DIFF_SEQUENCES` (default 600, shared by the two configurations)
//! and `WASMGATE_DIFF_SEED` steer it; `WASMGATE_DIFF_DUMP=FILE` keeps the
//! reference's raw result lines.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::Value;
use wasmgate_extism::{CallError, Manifest, Plugin, PluginOptions, Runtime, RuntimeConfig};
use wasmgate_testkit::fuzz::env_u64;

#[path = "host/common/mod.rs"]
mod common;
use common::script_guest::*;

// ---------------------------------------------------------------------------
// The two configurations every sequence runs under.

struct Target {
    name: &'static str,
    config: &'static [(&'static str, &'static str)],
    max_var_bytes: u64,
    http: bool,
}

const CONFIG: &[(&str, &str)] = &[
    ("greeting", "hello from the manifest"),
    ("empty", ""),
    ("", "the empty key's value"),
];

const TARGETS: &[Target] = &[
    Target {
        name: "vars",
        config: CONFIG,
        max_var_bytes: 4096,
        http: true,
    },
    Target {
        name: "no-vars",
        config: &[("greeting", "hello from the manifest")],
        max_var_bytes: 0,
        http: false,
    },
];

impl Target {
    fn manifest_json(&self) -> String {
        let config: serde_json::Map<String, Value> = self
            .config
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        let mut manifest = serde_json::json!({
            "config": config,
            "memory": {"max_var_bytes": self.max_var_bytes},
        });
        if self.http {
            manifest["allowed_hosts"] = serde_json::json!(["127.0.0.1"]);
        }
        manifest.to_string()
    }

    fn reference_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for (k, v) in self.config {
            flags.push("--config".into());
            flags.push(format!("{k}={v}"));
        }
        flags.push("--max-var-bytes".into());
        flags.push(self.max_var_bytes.to_string());
        if self.http {
            flags.push("--allow-host".into());
            flags.push("127.0.0.1".into());
        }
        flags
    }

    /// The config value's length for a key, if the key is in the config
    /// with a non-empty value (an empty value comes back as handle 0).
    fn config_len(&self, key: &[u8]) -> Option<u64> {
        self.config
            .iter()
            .find(|(k, _)| k.as_bytes() == key)
            .map(|(_, v)| v.len() as u64)
            .filter(|&n| n > 0)
    }
}

// ---------------------------------------------------------------------------
// The data the sequences' blocks are made of.

struct Entries {
    data: Data,
    keys: Vec<(u32, u32)>,
    texts: Vec<(u32, u32)>,
    json: Vec<(u32, u32)>,
}

impl Entries {
    fn new(port: u16) -> Entries {
        let mut data = Data::new();
        let add = |data: &mut Data, kind: &'static str, bytes: &[u8]| data.add(kind, bytes);
        for key in [
            &b"greeting"[..],
            b"empty",
            b"missing",
            b"",
            b"\xff\xfe not utf-8",
            b"v1",
            b"v2",
        ] {
            add(&mut data, "key", key);
        }
        for text in [
            &b"a log line"[..],
            b"",
            b"another line, with \"quotes\"",
            &[b'm'; 2000],
        ] {
            add(&mut data, "text", text);
        }
        let ok = format!(r#"{{"url":"http://127.0.0.1:{port}/ok"}}"#);
        for json in [
            ok.clone(),
            ok.clone(),
            ok,
            format!(
                r#"{{"url":"http://127.0.0.1:{port}/ok","method":"POST","headers":{{"x-a":"b"}}}}"#
            ),
            format!(r#"{{"url":"http://127.0.0.1:{port}/status/404"}}"#),
            r#"{"url":"http://example.com/"}"#.to_string(),
            r#"{"url":"not a url"}"#.to_string(),
            "{".to_string(),
        ] {
            add(&mut data, "json", json.as_bytes());
        }
        let keys = data.entries["key"].clone();
        let texts = data.entries["text"].clone();
        let json = data.entries["json"].clone();
        Entries {
            data,
            keys,
            texts,
            json,
        }
    }

    fn bytes(&self, (offset, len): (u32, u32)) -> &[u8] {
        &self.data.bytes[offset as usize..(offset + len) as usize]
    }
}

// ---------------------------------------------------------------------------
// The generator, with a model of what each register holds.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Key(usize),
    Text,
    Json,
    /// `alloc`ed: zeros until written.
    Zeros,
    /// A config value.
    Other,
    /// What `input_offset` returned (maybe an interior pointer).
    Input,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Reg {
    /// Nothing usable (never set, or from before a `reset`).
    Empty,
    /// Handle 0.
    Null,
    /// A block of a known (non-zero) length.
    Block { len: u64, live: bool, kind: Kind },
    /// 0 or a block of unknown length (`var_get`, `http_request`).
    Maybe,
    /// The input's length as read, at least 8 (so that `length - 8` does
    /// not wrap: the kernel's `offset + 8` would, and read before the input).
    InputLen,
    /// Any other value.
    Scalar,
}

/// Offsets outside every memory of both runtimes (the reference kernel
/// ignores anything whose last byte is below 64).
const LOW: &[u64] = &[0, 1, 8, 56];
const HIGH: &[u64] = &[1 << 32, (1 << 32) + 8, 1 << 40, u64::MAX - 7, u64::MAX];

struct Generator<'a> {
    rng: &'a mut Rng,
    entries: &'a Entries,
    target: &'a Target,
    regs: [Reg; 16],
    ops: Vec<Op>,
    /// Bytes allocated so far (kept small: see the top of the file).
    allocated: u64,
    /// A lower bound of the input's length.
    input_len: u64,
    /// The register whose block `input_set` made the input (freeing it
    /// empties the input).
    input_block: Option<u32>,
    /// Whether an HTTP request succeeded in this sequence (so status and
    /// headers are this sequence's, not left by an earlier one).
    http_done: bool,
    /// The sequence surely fails at its last op.
    failed: bool,
}

fn f(name: &str) -> u32 {
    host_fn(name)
}

impl Generator<'_> {
    fn new_block(&mut self, kind: &'static str, entry: Option<usize>, dest: u32) {
        let list = match kind {
            "key" => &self.entries.keys,
            "text" => &self.entries.texts,
            _ => &self.entries.json,
        };
        let i = entry.unwrap_or_else(|| loop {
            // Keys that are not UTF-8 fail the call: now and then only.
            let i = self.rng.below(list.len() as u32) as usize;
            let (offset, len) = list[i];
            let bytes = &self.entries.data.bytes[offset as usize..(offset + len) as usize];
            if kind != "key" || std::str::from_utf8(bytes).is_ok() || self.rng.chance(8) {
                break i;
            }
        });
        let (offset, len) = list[i];
        self.ops.push(Op {
            f: NEW_BLOCK,
            dest,
            a: lit(u64::from(offset)),
            b: lit(u64::from(len)),
        });
        self.allocated += u64::from(len);
        self.regs[dest as usize] = if len == 0 {
            Reg::Null
        } else {
            Reg::Block {
                len: u64::from(len),
                live: true,
                kind: match kind {
                    "key" => Kind::Key(i),
                    "text" => Kind::Text,
                    _ => Kind::Json,
                },
            }
        };
    }

    fn regs_where(&self, test: impl Fn(Reg) -> bool) -> Vec<u32> {
        (0..16).filter(|&r| test(self.regs[r as usize])).collect()
    }

    fn pick_reg(&mut self, test: impl Fn(Reg) -> bool) -> Option<u32> {
        let regs = self.regs_where(test);
        (!regs.is_empty()).then(|| self.rng.pick(&regs))
    }

    /// A destination register, sparing blocks now and then overwritten.
    fn dest(&mut self) -> u32 {
        self.rng.below(16)
    }

    /// A live block of `kind` (made now if there is none, or sometimes anyway).
    fn live(&mut self, kind: &'static str) -> u32 {
        let matching = |r: Reg| match r {
            Reg::Block {
                live: true,
                kind: k,
                ..
            } => match kind {
                "key" => matches!(k, Kind::Key(_)),
                "text" => k == Kind::Text,
                _ => k == Kind::Json,
            },
            _ => false,
        };
        if self.rng.chance(70) {
            if let Some(r) = self.pick_reg(matching) {
                return r;
            }
        }
        let dest = self.dest();
        self.new_block(kind, None, dest);
        dest
    }

    /// A handle for a host function that wants a block of `kind`: mostly a
    /// live one, else the edges. Returns the argument and what it is.
    fn handle_arg(&mut self, kind: &'static str) -> (Arg, Reg, Option<u32>) {
        let roll = self.rng.below(100);
        let freed = self.pick_reg(|r| matches!(r, Reg::Block { live: false, .. }));
        let block = self.pick_reg(|r| matches!(r, Reg::Block { len: 2.., .. }));
        let maybe = self.pick_reg(|r| r == Reg::Maybe || r == Reg::Null);
        match roll {
            0..=5 => (lit(0), Reg::Null, None),
            6..=9 if freed.is_some() => {
                let r = freed.unwrap();
                (reg(r, 0), self.regs[r as usize], Some(r))
            }
            10..=11 if block.is_some() => {
                let r = block.unwrap();
                (reg(r, 1), Reg::Scalar, None)
            }
            12..=15 if maybe.is_some() => {
                let r = maybe.unwrap();
                (reg(r, 0), Reg::Maybe, Some(r))
            }
            16..=17 => {
                let c = self.rng.pick(&[1, 63, 12345, 1 << 32, u64::MAX]);
                (lit(c), Reg::Scalar, None)
            }
            _ => {
                let r = self.live(kind);
                (reg(r, 0), self.regs[r as usize], Some(r))
            }
        }
    }

    /// A pointer and width inside a block (live or freed), or far outside
    /// memory. Stores spare the JSON requests: the reference refuses
    /// unknown fields, wasmgate ignores them.
    fn place(&mut self, width: u64, store: bool) -> Arg {
        let block = self.pick_reg(|r| {
            matches!(r, Reg::Block { len, kind, .. }
                if len >= width && len > 0 && !(store && kind == Kind::Json))
        });
        match block {
            Some(r) if self.rng.chance(85) => {
                let Reg::Block { len, .. } = self.regs[r as usize] else {
                    unreachable!()
                };
                let d = self.rng.below((len - width + 1).min(64) as u32);
                let d = if self.rng.chance(30) {
                    len - width
                } else {
                    u64::from(d)
                };
                reg(r, d)
            }
            _ if self.rng.chance(50) => {
                let low = if width == 8 { LOW } else { &[0, 1, 8, 63][..] };
                lit(self.rng.pick(low))
            }
            _ => lit(self.rng.pick(HIGH)),
        }
    }

    /// A range `(pointer, length)` inside a block, or an odd one the kernel
    /// ignores.
    fn range(&mut self) -> (Arg, Arg) {
        let block = self.pick_reg(|r| matches!(r, Reg::Block { .. }));
        match (block, self.rng.below(10)) {
            (Some(r), 0..=6) => {
                let Reg::Block { len, .. } = self.regs[r as usize] else {
                    unreachable!()
                };
                // An odd pointer inside the block (not at its end: there
                // wasmgate's next block starts, the reference's header).
                let d = if self.rng.chance(30) {
                    self.rng.pick(&[1, 3]).min(len - 1)
                } else {
                    0
                };
                let n = match self.rng.below(4) {
                    0 => 0,
                    1 => 1.min(len - d),
                    _ => len - d,
                };
                (reg(r, d), lit(n))
            }
            (_, 7) => (lit(0), lit(self.rng.pick(&[0, 5]))),
            (_, 8) => (lit(self.rng.pick(&[8, 63])), lit(4)),
            _ => (lit(self.rng.pick(HIGH)), lit(self.rng.pick(&[0, 1, 16]))),
        }
    }

    fn call(&mut self, name: &str, a: Arg, b: Arg, result: Reg) -> u32 {
        let dest = self.dest();
        self.ops.push(Op {
            f: f(name),
            dest,
            a,
            b,
        });
        self.regs[dest as usize] = result;
        dest
    }

    /// The block in `reg` was freed by the call just added.
    fn consume(&mut self, reg: Option<u32>) {
        if reg.is_some() && reg == self.input_block {
            self.input_len = 0;
        }
        if let Some(r) = reg {
            match self.regs[r as usize] {
                Reg::Block { len, kind, .. } => {
                    self.regs[r as usize] = Reg::Block {
                        len,
                        kind,
                        live: false,
                    }
                }
                // 0 or a freed block now: of no use.
                Reg::Maybe => self.regs[r as usize] = Reg::Empty,
                _ => {}
            }
        }
    }

    /// Whether `arg`/`what` is a handle the reference host rejects.
    fn invalid(what: Reg, arg: Arg) -> bool {
        match what {
            Reg::Null | Reg::Maybe => false,
            Reg::Block { live, .. } => !live,
            _ => arg.mode == 1 || arg.value != 0,
        }
    }

    fn key_bytes(&self, what: Reg) -> Option<&[u8]> {
        match what {
            Reg::Null => Some(b""),
            Reg::Block {
                kind: Kind::Key(i),
                live: true,
                ..
            } => Some(self.entries.bytes(self.entries.keys[i])),
            _ => None,
        }
    }

    /// Adds an op (or a few); false if the one chosen does not apply now.
    fn step(&mut self) -> bool {
        let choice = self.rng.below(100);
        match choice {
            0..=5 => {
                let kind = self.rng.pick(&["key", "text", "text", "json"]);
                let dest = self.dest();
                self.new_block(kind, None, dest);
            }
            6..=9 => {
                let n = self.rng.pick(&[0, 1, 8, 13, 100, 1000]);
                self.allocated += n;
                let result = if n == 0 {
                    Reg::Null
                } else {
                    Reg::Block {
                        len: n,
                        live: true,
                        kind: Kind::Zeros,
                    }
                };
                self.call("alloc", lit(n), lit(0), result);
            }
            10..=13 => {
                let (a, what, r) = self.handle_arg("text");
                self.call("free", a, lit(0), Reg::Scalar);
                if matches!(what, Reg::Block { .. }) && a.value == 0 {
                    self.consume(r);
                }
                if a.mode == 1 && Some(a.reg) == self.input_block {
                    self.input_len = 0;
                }
                if what == Reg::Maybe {
                    if let Some(r) = r {
                        self.regs[r as usize] = Reg::Empty;
                    }
                }
            }
            14..=17 => {
                let (a, _, _) = self.handle_arg("text");
                self.call("length", a, lit(0), Reg::Scalar);
            }
            18..=19 => {
                // The reference reads a header before the pointer: only handles.
                let a = match self.pick_reg(|r| match r {
                    Reg::Block { kind, .. } => kind != Kind::Input,
                    Reg::Null | Reg::Maybe => true,
                    _ => false,
                }) {
                    Some(r) => reg(r, 0),
                    None => lit(0),
                };
                self.call("length_unsafe", a, lit(0), Reg::Scalar);
            }
            20..=25 => {
                let (name, width) = self.rng.pick(&[("load_u8", 1), ("load_u64", 8)]);
                let a = self.place(width, false);
                self.call(name, a, lit(0), Reg::Scalar);
            }
            26..=30 => {
                let (name, width) = self.rng.pick(&[("store_u8", 1), ("store_u64", 8)]);
                let a = self.place(width, true);
                let v = if width == 1 {
                    u64::from(self.rng.below(256))
                } else {
                    self.rng.next_u64()
                };
                self.call(name, a, lit(v), Reg::Scalar);
            }
            31..=32 => {
                let result = if self.input_len >= 8 {
                    Reg::InputLen
                } else {
                    Reg::Scalar
                };
                self.call("input_length", lit(0), lit(0), result);
            }
            33 => {
                let result = if self.input_len > 0 {
                    Reg::Block {
                        len: self.input_len,
                        live: true,
                        kind: Kind::Input,
                    }
                } else {
                    Reg::Null
                };
                self.call("input_offset", lit(0), lit(0), result);
            }
            34..=38 => {
                let name = self.rng.pick(&["input_load_u8", "input_load_u64"]);
                let a = match (self.pick_reg(|r| r == Reg::InputLen), self.rng.below(3)) {
                    (Some(r), 0 | 1) => {
                        let d: u64 = self.rng.pick(&[0, 1, 3, 7, 8]);
                        reg(r, d.wrapping_neg())
                    }
                    _ => lit(self.rng.pick(&[0, 1, 7, 8, 15, 1 << 32, 1 << 62])),
                };
                self.call(name, a, lit(0), Reg::Scalar);
            }
            39..=40 => {
                let (a, b) = self.range();
                if a.mode == 1 {
                    self.input_len = b.value;
                    self.input_block = Some(a.reg);
                }
                self.call("input_set", a, b, Reg::Scalar);
            }
            41..=45 => {
                let (a, b) = self.range();
                self.call("output_set", a, b, Reg::Scalar);
            }
            46 => {
                let name = self
                    .rng
                    .pick(&["output_length", "output_offset", "error_get"]);
                self.call(name, lit(0), lit(0), Reg::Scalar);
            }
            47..=48 => {
                let a = match self.rng.below(6) {
                    0 => lit(0),
                    1 => lit(self.rng.pick(&[8, 63, 1 << 32, u64::MAX])),
                    2 => match self.pick_reg(|r| matches!(r, Reg::Block { live: false, .. })) {
                        Some(r) => reg(r, 0),
                        None => lit(0),
                    },
                    3 => match self.pick_reg(|r| matches!(r, Reg::Block { len: 2.., .. })) {
                        Some(r) => reg(r, 1),
                        None => lit(0),
                    },
                    _ => reg(self.live("text"), 0),
                };
                self.call("error_set", a, lit(0), Reg::Scalar);
            }
            49 => {
                if self.rng.chance(30) {
                    self.call("reset", lit(0), lit(0), Reg::Scalar);
                    self.regs = [Reg::Empty; 16];
                    self.input_len = 0;
                    self.input_block = None;
                }
            }
            50..=51 => {
                self.call("memory_bytes", lit(0), lit(0), Reg::Scalar);
            }
            52..=59 => {
                let (a, what, r) = self.handle_arg("key");
                let result = match self.key_bytes(what) {
                    Some(key) => match self.target.config_len(key) {
                        Some(len) => {
                            self.allocated += len;
                            Reg::Block {
                                len,
                                live: true,
                                kind: Kind::Other,
                            }
                        }
                        None => Reg::Null,
                    },
                    None => Reg::Maybe,
                };
                self.failed = Self::invalid(what, a)
                    || self
                        .key_bytes(what)
                        .is_some_and(|k| std::str::from_utf8(k).is_err());
                self.call("config_get", a, lit(0), result);
                self.consume(r);
            }
            60..=66 => {
                let (a, what, r) = self.handle_arg("key");
                self.failed = Self::invalid(what, a);
                self.call("var_get", a, lit(0), Reg::Maybe);
                self.allocated += 2000;
                self.consume(r);
            }
            // Vars disabled: var_set always fails, so rarely.
            67..=76 if self.target.max_var_bytes > 0 || self.rng.chance(5) => {
                let (a, what, r) = self.handle_arg("key");
                let (b, value, rv) = match self.rng.below(10) {
                    0..=2 => (lit(0), Reg::Null, None),
                    3 => (a, what, r),
                    4 => {
                        let r = self.live("key");
                        (reg(r, 0), self.regs[r as usize], Some(r))
                    }
                    _ => self.handle_arg("text"),
                };
                self.failed = self.target.max_var_bytes == 0
                    || Self::invalid(what, a)
                    || (b != lit(0) && Self::invalid(value, b));
                self.call("var_set", a, b, Reg::Scalar);
                self.consume(r);
                self.consume(rv);
            }
            77..=81 if self.target.http => {
                let (a, what, r) = self.handle_arg("json");
                let (b, _, rb) = if self.rng.chance(70) {
                    (lit(0), Reg::Null, None)
                } else {
                    self.handle_arg("text")
                };
                self.failed = Self::invalid(what, a);
                self.call("http_request", a, b, Reg::Maybe);
                self.consume(r);
                self.consume(rb);
                if let Reg::Block {
                    kind: Kind::Json, ..
                } = what
                {
                    self.http_done = true;
                }
            }
            82..=86 if self.http_done => {
                let name = self.rng.pick(&["http_status_code", "http_headers"]);
                let result = if name == "http_headers" {
                    Reg::Empty
                } else {
                    Reg::Scalar
                };
                self.call(name, lit(0), lit(0), result);
            }
            84..=95 => {
                let name = self.rng.pick(&[
                    "log_trace",
                    "log_debug",
                    "log_info",
                    "log_warn",
                    "log_error",
                ]);
                let (a, what, r) = self.handle_arg("text");
                let enabled = !matches!(name, "log_trace" | "log_debug");
                self.failed = enabled && Self::invalid(what, a);
                self.call(name, a, lit(0), Reg::Scalar);
                if enabled || matches!(what, Reg::Block { .. }) {
                    self.consume(r);
                }
            }
            96..=99 => {
                self.call("get_log_level", lit(0), lit(0), Reg::Scalar);
            }
            // Not for this target, or not now: choose again.
            _ => return false,
        }
        true
    }

    fn script(&mut self) -> Script {
        for dest in 0..3 {
            let kind = self.rng.pick(&["key", "text", "json"]);
            self.new_block(kind, None, dest);
        }
        let n = 6 + self.rng.below(35);
        for _ in 0..n {
            if self.allocated > 24_000 {
                break;
            }
            while !self.step() {}
            if self.failed {
                break;
            }
        }
        let code = match self.rng.below(10) {
            0 => 1,
            1 => 3,
            _ => 0,
        };
        Script {
            ops: std::mem::take(&mut self.ops),
            code,
        }
    }
}

/// Sequences written by hand: the edges of issue 19 and their neighbours.
fn fixed_scripts(e: &Entries) -> Vec<Script> {
    let key = |name: &[u8]| {
        let i = e.keys.iter().position(|&k| e.bytes(k) == name).unwrap();
        e.keys[i]
    };
    let text = |t: &[u8]| {
        let i = e.texts.iter().position(|&k| e.bytes(k) == t).unwrap();
        e.texts[i]
    };
    let block = |(offset, len): (u32, u32), dest: u32| Op {
        f: NEW_BLOCK,
        dest,
        a: lit(u64::from(offset)),
        b: lit(u64::from(len)),
    };
    let op = |name: &str, dest: u32, a: Arg, b: Arg| call_op(name, dest, a, b);
    vec![
        // log_info of an empty message (alloc(0) is 0), and of 0.
        Script {
            ops: vec![
                block(text(b""), 0),
                op("log_info", 1, reg(0, 0), lit(0)),
                op("log_info", 2, lit(0), lit(0)),
                op("log_error", 3, lit(0), lit(0)),
                op("alloc", 4, lit(0), lit(0)),
                op("log_warn", 5, reg(4, 0), lit(0)),
            ],
            code: 0,
        },
        // config_get(0): the key "" (in the "vars" target's config).
        Script {
            ops: vec![
                op("config_get", 1, lit(0), lit(0)),
                op("length", 2, reg(1, 0), lit(0)),
                op("output_set", 3, reg(1, 0), reg(2, 0)),
            ],
            code: 0,
        },
        // var_set(k, v), then var_set(k, 0) with the same (now freed) key handle.
        Script {
            ops: vec![
                block(key(b"v1"), 0),
                block(text(b"a log line"), 1),
                op("var_set", 2, reg(0, 0), reg(1, 0)),
                op("var_set", 3, reg(0, 0), lit(0)),
                op("var_get", 4, reg(0, 0), lit(0)),
            ],
            code: 0,
        },
        // The same with a new key block each time: the var is removed; and
        // the key "" by handle 0.
        Script {
            ops: vec![
                block(key(b"v1"), 0),
                block(text(b"a log line"), 1),
                op("var_set", 2, reg(0, 0), reg(1, 0)),
                block(key(b"v1"), 0),
                op("var_set", 3, reg(0, 0), lit(0)),
                block(key(b"v1"), 0),
                op("var_get", 4, reg(0, 0), lit(0)),
                block(text(b"another line, with \"quotes\""), 1),
                op("var_set", 5, lit(0), reg(1, 0)),
                op("var_get", 7, lit(0), lit(0)),
                op("length", 8, reg(7, 0), lit(0)),
                op("output_set", 9, reg(7, 0), reg(8, 0)),
            ],
            code: 0,
        },
        // input_load_u64(0) on a 3-byte input (input_set on a 3-byte
        // block), the other reads past its end, and a freed input.
        Script {
            ops: vec![
                op("alloc", 1, lit(3), lit(0)),
                op("store_u8", 2, reg(1, 0), lit(b'x'.into())),
                op("store_u8", 2, reg(1, 1), lit(b'y'.into())),
                op("store_u8", 2, reg(1, 2), lit(b'z'.into())),
                op("input_set", 2, reg(1, 0), lit(3)),
                op("input_length", 3, lit(0), lit(0)),
                op("input_load_u64", 4, lit(0), lit(0)),
                op("input_load_u8", 5, lit(0), lit(0)),
                op("input_load_u8", 6, lit(2), lit(0)),
                op("input_load_u8", 7, lit(3), lit(0)),
                op("input_load_u64", 8, lit(1 << 32), lit(0)),
                op("free", 9, reg(1, 0), lit(0)),
                op("input_length", 10, lit(0), lit(0)),
                op("input_load_u8", 11, lit(0), lit(0)),
            ],
            code: 0,
        },
        // Freed handles: length 0, output_set and error_set still take them.
        Script {
            ops: vec![
                block(text(b"a log line"), 0),
                op("free", 1, reg(0, 0), lit(0)),
                op("length", 2, reg(0, 0), lit(0)),
                op("length_unsafe", 3, reg(0, 0), lit(0)),
                op("free", 4, reg(0, 0), lit(0)),
                op("output_set", 5, reg(0, 1), lit(5)),
                op("error_set", 6, reg(0, 0), lit(0)),
                op("error_get", 7, lit(0), lit(0)),
                op("alloc", 8, lit(10), lit(0)),
                op("load_u64", 9, reg(8, 2), lit(0)),
            ],
            code: 0,
        },
        // A freed key, then a new value block: the key is the error.
        Script {
            ops: vec![
                block(key(b"v2"), 0),
                op("var_get", 1, reg(0, 0), lit(0)),
                block(text(b"a log line"), 2),
                op("var_set", 3, reg(0, 0), reg(2, 0)),
            ],
            code: 0,
        },
        // Loads and stores outside memory; the error set wins.
        Script {
            ops: vec![
                op("load_u64", 1, lit(0), lit(0)),
                op("load_u8", 2, lit(63), lit(0)),
                op("store_u64", 3, lit(8), lit(1)),
                op("store_u8", 3, lit(u64::MAX), lit(1)),
                op("load_u64", 4, lit(u64::MAX - 7), lit(0)),
                block(text(b"another line, with \"quotes\""), 0),
                op("error_set", 5, reg(0, 0), lit(0)),
                op("error_set", 6, lit(1 << 40), lit(0)),
            ],
            code: 1,
        },
    ]
}

// ---------------------------------------------------------------------------
// Running, and what is compared.

/// One sequence's run on one runtime.
#[derive(Debug)]
struct Run {
    reports: Vec<Report>,
    logs: Vec<(String, String)>,
    outcome: Outcome,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Output(Vec<u8>),
    /// The plugin's error (`error_set`) or the non-zero return's message.
    Error(String),
    /// A host function failed the call; its message, digits as `N`.
    HostError(String),
}

/// What tracing-subscriber's formatter makes of a message (0.3.20 and
/// later escape terminal control characters).
fn escape_controls(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' => out += &format!("\\x{:02x}", c as u32),
            c if (0x80..=0x9f).contains(&(c as u32)) => out += &format!("\\u{{{:x}}}", c as u32),
            c => out.push(c),
        }
    }
    out
}

fn digits_as_n(text: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    out
}

/// The reference's result line.
fn reference_run(line: &Value) -> Run {
    let reports = line["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_array().unwrap();
            let v = |i: usize| r[i].as_i64().unwrap();
            Report {
                seq: v(0) as u64,
                f: v(1) as u64,
                phase: v(2) as u8,
                result: v(3),
            }
        })
        .collect();
    let logs = line["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l[0].as_str().unwrap().to_string(),
                l[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let outcome = if line["ok"] == true {
        Outcome::Output(
            base64::engine::general_purpose::STANDARD
                .decode(line["output_b64"].as_str().unwrap())
                .unwrap(),
        )
    } else {
        let (display, chain) = (
            line["error"].as_str().unwrap(),
            line["error_chain"].as_str().unwrap(),
        );
        // A failed host function shows as a trap would; an error the plugin
        // had set is the call's error even then (as in wasmgate).
        if display.starts_with("error while executing at wasm backtrace") {
            // The host function's message ends the chain, after the last
            // frame: "    3: 0x1a2 - <unknown>!<wasm function 7>: <message>".
            let last = chain.lines().last().unwrap_or_default();
            let message = last
                .find('!')
                .and_then(|at| last[at..].split_once(": "))
                .map_or(last, |(_, message)| message);
            Outcome::HostError(digits_as_n(message))
        } else {
            Outcome::Error(display.to_string())
        }
    };
    Run {
        reports,
        logs,
        outcome,
    }
}

/// How a result is compared: handles by what they name.
#[derive(Default)]
struct Handles {
    seen: Vec<u64>,
}

impl Handles {
    /// A new block's handle (or 0, or a reused block's).
    fn block(&mut self, value: i64) -> String {
        let v = value as u64;
        if v == 0 {
            return "null".into();
        }
        if let Some(k) = self.seen.iter().rposition(|&s| s == v) {
            return format!("=#{k}");
        }
        self.seen.push(v);
        format!("new #{}", self.seen.len() - 1)
    }

    /// A pointer the guest passed in: a handle seen, or an offset into one.
    fn pointer(&mut self, value: i64) -> String {
        let v = value as u64;
        if v == 0 {
            return "null".into();
        }
        if let Some(k) = self.seen.iter().rposition(|&s| s == v) {
            return format!("=#{k}");
        }
        let below = self
            .seen
            .iter()
            .enumerate()
            .filter(|(_, &s)| s < v && v - s < 4096)
            .max_by_key(|(_, &s)| s);
        if let Some((k, s)) = below {
            return format!("#{k}+{}", v - s);
        }
        self.seen.push(v);
        format!("new #{}", self.seen.len() - 1)
    }
}

/// The reports as comparable lines.
fn describe(reports: &[Report]) -> Vec<String> {
    let mut handles = Handles::default();
    let mut lines = Vec::new();
    for r in reports {
        if r.phase == 2 {
            lines.push(format!("block -> {}", handles.block(r.result)));
            continue;
        }
        let name = HOST_FUNCTIONS[r.f as usize].name;
        if r.phase == 0 {
            lines.push(format!("{name} ..."));
            continue;
        }
        let value = match name {
            "alloc" | "config_get" | "var_get" | "http_request" => handles.block(r.result),
            "input_offset" | "output_offset" | "error_get" => handles.pointer(r.result),
            // Headers differ by HTTP client (date, server, ...).
            "http_headers" => (if r.result == 0 { "null" } else { "a block" }).into(),
            "reset" => {
                handles = Handles::default();
                "0".into()
            }
            _ => r.result.to_string(),
        };
        lines.push(format!("{name} -> {value}"));
    }
    lines
}

fn describe_script(script: &Script, entries: &Entries) -> String {
    let arg = |a: Arg| {
        if a.mode == 1 {
            format!("r{}+{}", a.reg, a.value as i64)
        } else {
            format!("{}", a.value as i64)
        }
    };
    let mut out = String::new();
    for op in &script.ops {
        if op.f == NEW_BLOCK {
            let bytes =
                &entries.data.bytes[op.a.value as usize..(op.a.value + op.b.value) as usize];
            out += &format!(
                "  r{} = block {:?}\n",
                op.dest,
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
            );
        } else {
            out += &format!(
                "  r{} = {}({}, {})\n",
                op.dest,
                HOST_FUNCTIONS[op.f as usize].name,
                arg(op.a),
                arg(op.b)
            );
        }
    }
    out += &format!("  return {}\n", script.code);
    out
}

// ---------------------------------------------------------------------------
// wasmgate's side.

static LOGS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The plugin log lines at INFO and above, as the reference's log callback
/// sees them at `info`.
struct Capture;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::INFO
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() != "wasmgate::plugin" {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        LOGS.lock().unwrap().push((level, message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

async fn wasmgate_runs(wasm: &Path, target: &Target, inputs: &[Vec<u8>]) -> Vec<Run> {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let reports: Reports = Arc::default();
    let mut manifest = Manifest::from_json(&target.manifest_json()).unwrap();
    manifest.wasm = Manifest::from_wasm_file(wasm).wasm;
    let plugin = Plugin::new(
        &runtime,
        &manifest,
        PluginOptions {
            name: Some(format!("diff-{}", target.name)),
            host_functions: vec![report_function(reports.clone())],
            ..PluginOptions::default()
        },
    )
    .unwrap();
    let mut runs = Vec::new();
    for input in inputs {
        reports.lock().unwrap().clear();
        LOGS.lock().unwrap().clear();
        let result = plugin.call("run", input).await;
        let outcome = match result {
            Ok(output) => Outcome::Output(output),
            Err(CallError::Crash(report)) if report.kind.as_str() == "host_error" => {
                Outcome::HostError(digits_as_n(&report.message))
            }
            Err(e @ (CallError::Plugin(_) | CallError::NonZeroExit(_))) => {
                Outcome::Error(e.to_string())
            }
            Err(other) => panic!("unexpected failure: {other}"),
        };
        runs.push(Run {
            reports: std::mem::take(&mut *reports.lock().unwrap()),
            logs: std::mem::take(&mut *LOGS.lock().unwrap()),
            outcome,
        });
    }
    runs
}

fn reference_runs(wasm: &Path, target: &Target, inputs: &[Vec<u8>]) -> Vec<Run> {
    let mut child = Command::new(wasmgate_testkit::extism_reference())
        .arg("script")
        .arg(wasm)
        .args(target.reference_flags())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines: Vec<String> = inputs
        .iter()
        .map(|i| base64::engine::general_purpose::STANDARD.encode(i))
        .collect();
    let writer = std::thread::spawn(move || {
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    });
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // WASMGATE_DIFF_DUMP=FILE keeps the reference's lines, for debugging.
    let mut dump = std::env::var_os("WASMGATE_DIFF_DUMP").map(|path| {
        std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    });
    let runs: Vec<Run> = stdout
        .lines()
        .map(|l| {
            let l = l.unwrap();
            if let Some(dump) = &mut dump {
                writeln!(dump, "{l}").unwrap();
            }
            reference_run(&serde_json::from_str(&l).unwrap())
        })
        .collect();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(runs.len(), inputs.len(), "the reference stopped early");
    runs
}

/// What must agree between the runtimes, or why it does not; `None` when equal.
fn difference(ours: &Run, theirs: &Run) -> Option<String> {
    let (a, b) = (describe(&ours.reports), describe(&theirs.reports));
    if a != b {
        let first = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        return Some(format!(
            "reports differ at {first}:\n  wasmgate: {:?}\n  extism:   {:?}",
            &a[first.saturating_sub(2)..(first + 2).min(a.len())],
            &b[first.saturating_sub(2)..(first + 2).min(b.len())],
        ));
    }
    match (&ours.outcome, &theirs.outcome) {
        // An error message that is not UTF-8: wasmgate reports it lossily,
        // the reference says it could not read it.
        (Outcome::Error(o), Outcome::Error(t))
            if o.contains('\u{fffd}')
                && t.starts_with("unable to load error message from memory: ") => {}
        // The same message, or wasmgate's says what was invalid first
        // ("invalid http request JSON: " and serde's message).
        (Outcome::HostError(o), Outcome::HostError(t)) if !o.ends_with(t.as_str()) => {
            return Some(format!(
                "host errors differ:\n  wasmgate: {o}\n  extism:   {t}"
            ));
        }
        // A host function failed the call after the plugin had set an
        // error: wasmgate's caller gets the plugin's error; the reference's
        // error shows the trap, with the plugin's message (not the host
        // function's) at the end of its chain.
        (Outcome::Error(o), Outcome::HostError(t))
            if &digits_as_n(o) == t && ours.reports.last().is_some_and(|r| r.phase == 0) => {}
        (Outcome::HostError(_), Outcome::HostError(_)) => {}
        (o, t) if o != t => {
            return Some(format!(
                "outcomes differ:\n  wasmgate: {o:?}\n  extism:   {t:?}"
            ))
        }
        _ => {}
    }
    // Bytes that are not UTF-8: wasmgate logs them lossily at the level
    // asked for, the reference logs an error line about them instead. The
    // reference's formatter escapes terminal control characters.
    let comparable = |logs: &[(String, String)], escape: bool| -> Vec<(String, String)> {
        logs.iter()
            .filter(|(_, m)| !m.contains('\u{fffd}') && !m.starts_with("unable to log message"))
            .map(|(level, m)| {
                (
                    level.clone(),
                    if escape {
                        escape_controls(m)
                    } else {
                        m.clone()
                    },
                )
            })
            .collect()
    };
    if comparable(&ours.logs, true) != comparable(&theirs.logs, false) {
        return Some(format!(
            "logs differ:\n  wasmgate: {:?}\n  extism:   {:?}",
            ours.logs, theirs.logs
        ));
    }
    None
}

// ---------------------------------------------------------------------------
// The HTTP server both runtimes' requests go to.

fn serve_http() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let length: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let chunked = text.contains("transfer-encoding: chunked");
                let body_start = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let mut body = head[body_start..].to_vec();
                // The whole body (ureq sends a POST's chunked), so that
                // closing does not reset the connection under the client.
                while if chunked {
                    !body.ends_with(b"0\r\n\r\n")
                } else {
                    body.len() < length
                } {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => body.extend_from_slice(&buf[..n]),
                    }
                }
                let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                let (status, answer) = if path.starts_with("/status/404") {
                    ("404 Not Found", "nope")
                } else {
                    ("200 OK", "pong")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nx-test: yes\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.shutdown(std::net::Shutdown::Write);
                let _ = stream.read(&mut buf);
            });
        }
    });
    port
}

#[tokio::test(flavor = "current_thread")]
async fn generated_sequences_match_the_reference_call_by_call() {
    tracing::subscriber::set_global_default(Capture).unwrap();
    // A missing reference fails here, saying how to build it, before any work.
    wasmgate_testkit::extism_reference();
    let sequences = env_u64("WASMGATE_DIFF_SEQUENCES", 600);
    let seed = env_u64("WASMGATE_DIFF_SEED", 0xd1ff_0019);
    let port = serve_http();
    let entries = Entries::new(port);
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("script_guest.wat");
    std::fs::write(&wasm, guest_wat()).unwrap();

    let mut rng = Rng(seed);
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for target in TARGETS {
        let mut scripts = fixed_scripts(&entries);
        let fixed = scripts.len();
        for _ in 0..sequences / TARGETS.len() as u64 {
            let mut generator = Generator {
                rng: &mut rng,
                entries: &entries,
                target,
                regs: [Reg::Empty; 16],
                ops: Vec::new(),
                allocated: 0,
                input_len: 16,
                input_block: None,
                http_done: false,
                failed: false,
            };
            scripts.push(generator.script());
        }
        let inputs: Vec<Vec<u8>> = scripts.iter().map(|s| s.encode(&entries.data)).collect();
        let ours = wasmgate_runs(&wasm, target, &inputs).await;
        // Blocks this thread: the HTTP server has its own threads.
        let theirs = reference_runs(&wasm, target, &inputs);
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            let calls = o.reports.iter().filter(|r| r.finished()).count() as u64;
            *totals.entry(format!("{} calls", target.name)).or_default() += calls;
            let class = match &o.outcome {
                Outcome::Output(_) => "output".to_string(),
                Outcome::Error(_) => "plugin error or return code".to_string(),
                Outcome::HostError(m) => {
                    let m: String = m.chars().take(40).collect();
                    format!("a host function failed it: {m}")
                }
            };
            *totals
                .entry(format!("{} outcome: {class}", target.name))
                .or_default() += 1;
            for r in o.reports.iter().filter(|r| r.finished()) {
                *totals
                    .entry(format!("fn {}", HOST_FUNCTIONS[r.f as usize].name))
                    .or_default() += 1;
            }
            if let Some(why) = difference(o, t) {
                let which = if i < fixed {
                    format!("fixed sequence {i}")
                } else {
                    format!("generated sequence {}", i - fixed)
                };
                failures.push(format!(
                    "{} / {which} (seed {seed:#x}):\n{}{why}\n  wasmgate outcome: {:?}\n  extism outcome:   {:?}",
                    target.name,
                    describe_script(&scripts[i], &entries),
                    o.outcome,
                    t.outcome
                ));
            }
        }
    }
    for (what, n) in &totals {
        println!("{what}: {n}");
    }
    assert!(
        failures.is_empty(),
        "{} of the sequences differ; the first ones:\n\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    for h in HOST_FUNCTIONS {
        assert!(
            totals.contains_key(&format!("fn {}", h.name)),
            "{} was never called",
            h.name
        );
    }
}
