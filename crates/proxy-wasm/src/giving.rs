//! The host functions that hand the guest a value (a header, a property,
//! a body chunk, ...) without a second fiber.
//!
//! The ABI has the host put such a value in memory the guest allocates, by
//! calling the guest's `proxy_on_memory_allocate` (or `malloc`) from inside
//! the host function. From a host function, wasmtime can call into the guest
//! only with `call_async`, which starts a fiber of its own: a thousand
//! instructions or so per value, and a filter reads a few values on every
//! request. So the guest does not import these functions from the host:
//! it imports them from a small module of ours, instantiated in the same
//! store, whose function of each name calls the host's (which leaves the
//! value waiting, `state::give`), then the guest's allocator through a
//! table (wasm calling wasm, on the fiber of the callback) and then the
//! host again to copy the value into place (`state::complete_handover`).
//! What the guest sees is what it saw before: the same calls into its
//! allocator, in the same order, the same bytes, pointers and statuses.

use std::sync::OnceLock;

use wasmgate_runtime::Runtime;
use wasmtime::{Caller, Func, Instance, InstancePre, Linker, Ref, Store, Table};

use crate::host_env::{GIVING_MODULE, MODULE};
use crate::state::{complete_handover, next_handover_len, FilterState, VALUE_WAITING};

/// The functions that give, with their number of (i32) parameters.
pub(crate) const GIVING: &[(&str, usize)] = &[
    ("proxy_get_buffer_bytes", 5),
    ("proxy_get_header_map_pairs", 3),
    ("proxy_get_header_map_value", 5),
    ("proxy_get_property", 4),
    ("proxy_get_status", 3),
    ("proxy_get_shared_data", 5),
    ("proxy_dequeue_shared_queue", 3),
];

/// Whether `env`'s function `name` is one of [`GIVING`].
pub(crate) fn gives(name: &str) -> bool {
    GIVING.iter().any(|(n, _)| *n == name)
}

/// The module: for each giving function, one that calls the host's and,
/// if that left a value waiting ([`VALUE_WAITING`]), has the allocator
/// (slot 0 of its table) make room for it and answers `Ok`.
fn wat() -> &'static str {
    static WAT: OnceLock<String> = OnceLock::new();
    WAT.get_or_init(|| {
        // Imports come first in the text format, then the table, then code.
        let mut imports = String::new();
        let mut functions = String::new();
        for (name, params) in GIVING {
            let types = " i32".repeat(*params);
            let args: String = (0..*params).map(|i| format!(" (local.get {i})")).collect();
            imports += &format!(
                "  (import \"{GIVING_MODULE}\" \"{name}\" (func ${name} (param{types}) (result i32)))\n"
            );
            functions += &format!(
                r#"  (func (export "{name}") (param{types}) (result i32) (local $status i32)
    (local.set $status (call ${name}{args}))
    (if (i32.eq (local.get $status) (i32.const {VALUE_WAITING}))
      (then
        (call $complete (call_indirect (type $allocate) (call $next_len) (i32.const 0)))
        (local.set $status (i32.const 0))))
    (local.get $status))
"#
            );
        }
        format!(
            r#"(module $wasmgate_giving
  (type $allocate (func (param i32) (result i32)))
  (import "{GIVING_MODULE}" "next_value_len" (func $next_len (result i32)))
  (import "{GIVING_MODULE}" "complete_handover" (func $complete (param i32)))
{imports}  (table (export "allocator") 1 1 funcref)
{functions})
"#
        )
    })
}

type Ctx<'a> = Caller<'a, FilterState>;

/// The two functions the module calls besides the giving ones (which
/// `host_env` links under [`GIVING_MODULE`]).
pub(crate) fn add_to_linker(linker: &mut Linker<FilterState>) -> wasmtime::Result<()> {
    linker.func_wrap(GIVING_MODULE, "next_value_len", |c: Ctx| {
        next_handover_len(&c)
    })?;
    linker.func_wrap(
        GIVING_MODULE,
        "complete_handover",
        |mut c: Ctx, ptr: u32| complete_handover(&mut c, ptr),
    )?;
    Ok(())
}

/// The module compiled once per runtime (the runtime keeps modules by their
/// hash) and linked to the host's functions.
pub(crate) fn prepare(
    runtime: &Runtime,
    linker: &Linker<FilterState>,
) -> anyhow::Result<InstancePre<FilterState>> {
    let module = runtime.load_module(wat().as_bytes())?;
    Ok(linker.instantiate_pre(&module)?)
}

/// An instance of the module in a filter's store, before the filter's own.
pub(crate) struct Giving {
    instance: Instance,
    allocator: Table,
}

impl Giving {
    pub async fn instantiate(
        pre: &InstancePre<FilterState>,
        store: &mut Store<FilterState>,
    ) -> wasmtime::Result<Giving> {
        let instance = pre.instantiate_async(&mut *store).await?;
        let allocator = instance
            .get_table(&mut *store, "allocator")
            .expect("the giving module exports its table");
        Ok(Giving {
            instance,
            allocator,
        })
    }

    /// The module's function `name`, one of [`GIVING`]: what the filter
    /// imports as `env`'s `name`.
    pub fn import(&self, store: &mut Store<FilterState>, name: &str) -> Func {
        self.instance
            .get_func(store, name)
            .expect("the giving module has every giving function")
    }

    /// Points the module at the filter's allocator, once the filter exists.
    pub fn set_allocator(
        &self,
        store: &mut Store<FilterState>,
        allocate: Func,
    ) -> wasmtime::Result<()> {
        self.allocator.set(store, 0, Ref::Func(Some(allocate)))
    }
}

/// Whether an import of the filter's is one the giving module answers.
pub(crate) fn answers(module: &str, name: &str) -> bool {
    module == MODULE && gives(name)
}
