//! The fuzzer's scripts: hostile handles, offsets and lengths (the edges
//! of Extism memory, of wasm32 and of u64) for every host function, and
//! the blocks (keys, texts, HTTP request JSON, random bytes) they use.

use std::collections::BTreeMap;

use crate::common::script_guest::P::*;
use crate::common::script_guest::*;

/// Offsets and lengths on the edges of Extism memory (blocks start at 64),
/// of wasm32 and of u64.
fn edge(rng: &mut Rng) -> u64 {
    let choices = [
        0,
        1,
        7,
        8,
        63,
        64,
        65,
        72,
        0xffff,
        0x1_0000,
        0x1_0001,
        (4 << 20) - 1,
        4 << 20,
        1 << 30,
        3 << 30,
        (1 << 32) - 128,
        (1 << 32) - 1,
        1 << 32,
        (1 << 32) + 64,
        1 << 40,
        i64::MAX as u64,
        1 << 63,
        u64::MAX,
        u64::MAX - 7,
        u64::MAX - 63,
        rng.next_u64(),
    ];
    rng.pick(&choices)
}

pub(super) fn fuzz_data(port: u16, rng: &mut Rng) -> Data {
    let mut d = Data {
        bytes: Vec::new(),
        entries: BTreeMap::new(),
    };
    for key in [
        &b"greeting"[..],
        b"empty",
        b"missing",
        b"v1",
        b"v2",
        b"",
        b"\xff\xfe not utf-8",
        &[b'k'; 300],
    ] {
        d.add("key", key);
    }
    for message in [&b"a log line"[..], b"", b"\x00\xff\xfe", &[b'm'; 2000]] {
        d.add("text", message);
    }
    let local = format!("http://127.0.0.1:{port}");
    let long_url = format!(r#"{{"url":"{local}/ok?{}"}}"#, "q".repeat(10_000));
    for json in [
        format!(r#"{{"url":"{local}/ok"}}"#),
        format!(r#"{{"url":"{local}/ok","method":"POST","headers":{{"x-a":"b"}}}}"#),
        format!(r#"{{"url":"{local}/ok","method":"head"}}"#),
        format!(r#"{{"url":"{local}/big"}}"#),
        format!(r#"{{"url":"{local}/garbage"}}"#),
        format!(r#"{{"url":"{local}/close"}}"#),
        format!(r#"{{"url":"{local}/slow"}}"#),
        format!(r#"{{"url":"{local}/status/503"}}"#),
        format!(r#"{{"url":"{local}/ok","method":"BAD METHOD"}}"#),
        format!(r#"{{"url":"{local}/ok","method":""}}"#),
        format!(r#"{{"url":"{local}/ok","method":"CONNECT"}}"#),
        format!(r#"{{"url":"{local}/ok","headers":{{"bad name":"x"}}}}"#),
        format!(r#"{{"url":"{local}/ok","headers":{{"x":"a\nb"}}}}"#),
        format!(r#"{{"url":"http://user:pw@127.0.0.1:{port}/ok"}}"#),
        r#"{"url":"http://127.0.0.1:1/refused"}"#.to_string(),
        r#"{"url":"http://example.com/"}"#.to_string(),
        r#"{"url":"not a url"}"#.to_string(),
        r#"{"url":"file:///etc/passwd"}"#.to_string(),
        r#"{"url":"ftp://127.0.0.1/x"}"#.to_string(),
        r#"{"url":"http://[::1"}"#.to_string(),
        r#"{"url":7}"#.to_string(),
        "{".to_string(),
        "[]".to_string(),
        String::new(),
        long_url,
    ] {
        d.add("json", json.as_bytes());
    }
    let random = rng.bytes(256);
    d.add("random", &random);
    d
}

/// Registers 0..6 hold blocks the script made; the rest, call results.
const BLOCK_REGS: u32 = 6;

pub(super) struct Generator<'a> {
    rng: &'a mut Rng,
    data: &'a Data,
    hostile: u32,
    /// What kind of bytes each block register holds ("" once freed).
    kinds: [&'static str; BLOCK_REGS as usize],
    /// Blocks to make before the op being generated.
    pending: Vec<Op>,
}

impl<'a> Generator<'a> {
    /// A generator of one script, of the blocks of `data`.
    pub(super) fn new(rng: &'a mut Rng, data: &'a Data) -> Generator<'a> {
        Generator {
            rng,
            data,
            hostile: 0,
            kinds: [""; BLOCK_REGS as usize],
            pending: Vec::new(),
        }
    }
}

/// Functions that take (and free) the blocks they are given.
fn consumes(name: &str) -> bool {
    matches!(
        name,
        "config_get" | "var_get" | "var_set" | "http_request" | "free"
    ) || name.starts_with("log_")
}

/// The kind of block a function's handle parameter wants.
fn wants(name: &str) -> Option<&'static str> {
    match name {
        "config_get" | "var_get" | "var_set" => Some("key"),
        "http_request" => Some("json"),
        n if n.starts_with("log_") => Some("text"),
        _ => None,
    }
}

impl Generator<'_> {
    fn new_block(&mut self, kind: &'static str, dest: u32) -> Op {
        self.kinds[dest as usize] = kind;
        let (offset, len) = self.rng.pick(&self.data.entries[kind]);
        Op {
            f: NEW_BLOCK,
            dest,
            a: lit(u64::from(offset)),
            b: lit(u64::from(len)),
        }
    }

    /// A register holding a live block of `kind` (made now if none does).
    fn block_of(&mut self, kind: Option<&'static str>) -> u32 {
        let matching: Vec<u32> = (0..BLOCK_REGS)
            .filter(|r| match kind {
                Some(kind) => self.kinds[*r as usize] == kind,
                None => !self.kinds[*r as usize].is_empty(),
            })
            .collect();
        if !matching.is_empty() && self.rng.chance(90) {
            return self.rng.pick(&matching);
        }
        let r = self.rng.below(BLOCK_REGS);
        let kind = kind.unwrap_or_else(|| self.rng.pick(&["key", "text", "json", "random"]));
        let op = self.new_block(kind, r);
        self.pending.push(op);
        r
    }

    fn arg(&mut self, p: P, wanted: Option<&'static str>) -> Arg {
        let valid = !self.rng.chance(self.hostile);
        if p == Handle && valid && self.rng.chance(85) {
            // A block the script made.
            let r = self.block_of(wanted);
            return reg(r, 0);
        }
        let rng = &mut *self.rng;
        match p {
            Handle if valid => match rng.below(10) {
                // A block or value a call returned.
                0..=6 => reg(rng.below(16), 0),
                // Into the middle of a block, or at its end.
                7 => reg(rng.below(16), u64::from(rng.below(16))),
                8 => lit(64),
                _ => lit(0),
            },
            Handle => match rng.below(3) {
                0 => reg(rng.below(16), rng.pick(&[u64::MAX, 1 << 32, 4096, 1, 8])),
                _ => lit(edge(rng)),
            },
            Len if valid => match rng.below(10) {
                0..=2 => reg(rng.below(16), 0),
                3 => lit(rng.pick(&[100, 1000, 65536])),
                _ => lit(rng.pick(&[0, 1, 2, 8])),
            },
            Len | InputAt if !valid => lit(edge(rng)),
            InputAt => lit(u64::from(rng.below(64))),
            Byte => lit(u64::from(rng.below(256))),
            Word => lit(rng.next_u64()),
            _ => lit(edge(rng)),
        }
    }

    pub(super) fn script(&mut self, max_ops: u32) -> Script {
        self.hostile = self.rng.pick(&[0, 2, 5, 10, 25, 50]);
        self.kinds = [""; BLOCK_REGS as usize];
        let mut ops = Vec::new();
        for dest in 0..BLOCK_REGS {
            let kind = self.rng.pick(&["key", "key", "text", "json", "random"]);
            ops.push(self.new_block(kind, dest));
        }
        for _ in 0..self.rng.below(max_ops + 1) {
            // Calls that take a block free it: make new ones now and then.
            if self.rng.chance(20) {
                let kind = self.rng.pick(&["key", "text", "json", "json"]);
                let dest = self.rng.below(BLOCK_REGS);
                ops.push(self.new_block(kind, dest));
                continue;
            }
            let f = self.rng.below(HOST_FUNCTIONS.len() as u32);
            let h = &HOST_FUNCTIONS[f as usize];
            let wanted = wants(h.name);
            let a = h
                .params
                .first()
                .map_or(Arg::default(), |p| self.arg(*p, wanted));
            let b = match h.params.get(1) {
                // A request body: mostly none.
                Some(_) if h.name == "http_request" && self.rng.chance(60) => lit(0),
                // A var's value: any block.
                Some(p) if h.name == "var_set" => self.arg(*p, None),
                Some(p) => self.arg(*p, wanted),
                None => Arg::default(),
            };
            let dest = BLOCK_REGS + self.rng.below(16 - BLOCK_REGS);
            ops.append(&mut self.pending);
            ops.push(Op { f, dest, a, b });
            // Track what the call freed.
            if h.name == "reset" {
                self.kinds = [""; BLOCK_REGS as usize];
            }
            if consumes(h.name) {
                for arg in [a, b] {
                    if arg.mode == 1 && arg.reg < BLOCK_REGS && arg.value == 0 {
                        self.kinds[arg.reg as usize] = "";
                    }
                }
            }
        }
        let code = match self.rng.below(10) {
            0 => 1,
            1 => -1,
            _ => 0,
        };
        Script { ops, code }
    }
}
