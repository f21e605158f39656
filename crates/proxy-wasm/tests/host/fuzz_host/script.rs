//! Scripts: the calls one phase makes (ops and their arguments), encoded
//! for the guest.

use super::blob::Blob;
use super::guest::{ARGS, HEADER, OUT};
use super::host_fns::{host_fn, HOST_FUNCTIONS};

#[derive(Clone, Copy)]
pub(super) struct Op {
    pub(super) f: u32,
    pub(super) mask: u32,
    pub(super) args: [u32; ARGS],
}

pub(super) struct Script {
    pub(super) ops: Vec<Op>,
    pub(super) action: u32,
    pub(super) tick: u32,
    pub(super) alloc_mode: u32,
    pub(super) alloc_value: u32,
    pub(super) max_depth: u32,
    pub(super) reentrant: Op,
}

impl Script {
    pub(super) fn new(ops: Vec<Op>) -> Script {
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

    pub(super) fn encode(&self, blob: &Blob) -> Vec<u8> {
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
pub(super) fn indirect(slot: u32, offset: i16) -> u32 {
    (u32::from(offset as u16) << 16) | (OUT + 4 * slot)
}

pub(super) struct OpBuilder {
    pub(super) f: u32,
    pub(super) mask: u32,
    pub(super) args: Vec<u32>,
}

impl OpBuilder {
    pub(super) fn new(name: &str) -> OpBuilder {
        OpBuilder {
            f: host_fn(name),
            mask: 0,
            args: Vec::new(),
        }
    }

    pub(super) fn arg(mut self, value: u32) -> Self {
        self.args.push(value);
        self
    }

    pub(super) fn ind(mut self, slot: u32, offset: i16) -> Self {
        self.mask |= 1 << self.args.len();
        self.args.push(indirect(slot, offset));
        self
    }

    pub(super) fn buf(self, (ptr, len): (u32, u32)) -> Self {
        self.arg(ptr).arg(len)
    }

    pub(super) fn out(self, slot: u32) -> Self {
        self.arg(OUT + 4 * slot)
    }

    pub(super) fn build(self) -> Op {
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
