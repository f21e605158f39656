//! The generator of call sequences, with a model of what each of its
//! registers holds, so that it knows which calls are edges (a freed block,
//! an interior pointer, an offset past the memory) and which must succeed.

use crate::common::script_guest::*;
use crate::entries::Entries;
use crate::targets::Target;

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

pub(crate) struct Generator<'a> {
    rng: &'a mut Rng,
    entries: &'a Entries,
    target: &'a Target,
    regs: [Reg; 16],
    ops: Vec<Op>,
    /// Bytes allocated so far (kept small: see the top of `main.rs`).
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

impl<'a> Generator<'a> {
    /// A generator of one sequence for `target`, from `rng`.
    pub(crate) fn new(rng: &'a mut Rng, entries: &'a Entries, target: &'a Target) -> Generator<'a> {
        Generator {
            rng,
            entries,
            target,
            regs: [Reg::Empty; 16],
            ops: Vec::new(),
            allocated: 0,
            input_len: 16,
            input_block: None,
            http_done: false,
            failed: false,
        }
    }
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

    pub(crate) fn script(&mut self) -> Script {
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
