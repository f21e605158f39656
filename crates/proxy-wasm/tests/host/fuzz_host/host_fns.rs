//! The host functions the fuzzer drives, with the roles of their
//! parameters, and the check that the table names every function the host
//! links.

/// What a parameter is, so arguments can be valid often enough to reach deep
/// into the host and hostile often enough to hit every check.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum P {
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
    pub(super) fn is_buf(self) -> bool {
        matches!(
            self,
            P::Bytes | P::Key | P::Value | P::Path | P::Name | P::Upstream | P::Map
        )
    }

    /// Argument slots the parameter takes in a script op.
    pub(super) fn slots(self) -> usize {
        if self.is_buf() || self == P::I64 {
            2
        } else {
            1
        }
    }
}

pub(super) struct HostFn {
    pub(super) name: &'static str,
    pub(super) params: &'static [P],
    /// Whether it returns a status (only the stub of an unknown import without
    /// a result does not).
    pub(super) returns_status: bool,
}

pub(super) const fn f(name: &'static str, params: &'static [P]) -> HostFn {
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
pub(super) const HOST_FUNCTIONS: &[HostFn] = &[
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
pub(super) const STUBBED: &[&str] = &[
    "proxy_fuzz_unknown_with_status",
    "proxy_fuzz_unknown_without_status",
];

pub(super) fn host_fn(name: &str) -> u32 {
    HOST_FUNCTIONS
        .iter()
        .position(|h| h.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the table")) as u32
}

/// The statuses of the ABI (`abi::Status`): a host function returns nothing else.
pub(super) const STATUSES: &[u32] = &[0, 1, 2, 3, 4, 7, 8, 10, 12];

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
