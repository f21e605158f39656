//! Sequences written by hand: the edges of issue 19 and their neighbours,
//! run before the generated ones under both configurations.

use crate::common::script_guest::*;
use crate::entries::Entries;

/// Sequences written by hand: the edges of issue 19 and their neighbours.
pub(crate) fn fixed_scripts(e: &Entries) -> Vec<Script> {
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
