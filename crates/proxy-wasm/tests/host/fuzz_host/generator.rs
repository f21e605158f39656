//! The script generator: calls valid often enough to reach deep into the
//! host, hostile often enough to hit every check.

use wasmgate_testkit::fuzz::Rng;

use super::blob::{edge, Blob};
use super::guest::{
    ARGS, CONFIGURE, DATA, HEAP, MEM, OUT, OUT_SLOTS, REQUEST_BODY, REQUEST_HEADERS,
    REQUEST_TRAILERS, RESPONSE_BODY, RESPONSE_HEADERS, RESPONSE_TRAILERS,
};
use super::host_fns::P::*;
use super::host_fns::{host_fn, HOST_FUNCTIONS, P};
use super::script::{indirect, Op, OpBuilder, Script};

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

pub(super) struct Generator<'a> {
    pub(super) rng: &'a mut Rng,
    pub(super) blob: &'a Blob,
    /// Percent of arguments drawn hostile; varies per script so that some
    /// scripts run long sequences of valid calls and others fail at once.
    pub(super) hostile: u32,
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

    pub(super) fn buf(&mut self, p: P, valid: bool) -> (Vec<u32>, u32) {
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
    pub(super) fn function(&mut self) -> u32 {
        loop {
            let f = self.rng.below(HOST_FUNCTIONS.len() as u32);
            if HOST_FUNCTIONS[f as usize].returns_status || self.rng.chance(25) {
                return f;
            }
        }
    }

    pub(super) fn script(&mut self, phase: u8, max_ops: u32) -> Script {
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
