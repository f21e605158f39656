//! What the calls' arguments point at: numbers on the edges of the guest's
//! memory and of u32/i32, and the data blob of strings, paths and
//! serialized maps. (The randomness is testkit's seeded SplitMix64, so a
//! failing run can be replayed.)

use std::collections::BTreeMap;

use wasmgate_testkit::fuzz::Rng;

use super::guest::{DATA, DATA_MAX, MEM};

/// Numbers that sit on the edges of the guest's memory and of u32/i32.
pub(super) fn edge(rng: &mut Rng) -> u32 {
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

#[derive(Default)]
pub(super) struct Blob {
    pub(super) bytes: Vec<u8>,
    /// (pointer in guest memory, length) of each entry, by kind.
    by_kind: BTreeMap<&'static str, Vec<(u32, u32)>>,
    pub(super) all: Vec<(u32, u32)>,
    /// Bytes before the padding.
    pub(super) used: u32,
}

impl Blob {
    pub(super) fn add(&mut self, kind: &'static str, bytes: &[u8]) -> (u32, u32) {
        let entry = (DATA + self.bytes.len() as u32, bytes.len() as u32);
        self.bytes.extend_from_slice(bytes);
        // A NUL after each entry, as C strings from an SDK would have.
        self.bytes.push(0);
        self.by_kind.entry(kind).or_default().push(entry);
        self.all.push(entry);
        entry
    }

    pub(super) fn kind(&self, kind: &str) -> &[(u32, u32)] {
        self.by_kind.get(kind).map_or(&[], Vec::as_slice)
    }

    /// Pads to a fixed size so that each phase's copy overwrites all of the
    /// last one (a probe's data never survives into a fuzzed stream).
    pub(super) fn finish(mut self) -> Blob {
        assert!(self.bytes.len() <= DATA_MAX as usize);
        self.used = self.bytes.len() as u32;
        self.bytes.resize(DATA_MAX as usize, 0);
        self
    }
}

pub(super) fn encode_map(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    wasmgate_proxy_wasm::pairs::encode(pairs)
}

pub(super) fn fuzz_blob(rng: &mut Rng) -> Blob {
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
