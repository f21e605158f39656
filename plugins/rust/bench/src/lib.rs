//! Benchmark exports: `echo` (output = input), `consume` (reads the input,
//! outputs nothing), `noop`. Needs no host function (see `reflect` for that).

use extism_pdk::*;

#[plugin_fn]
pub fn echo(input: Vec<u8>) -> FnResult<Vec<u8>> {
    Ok(input)
}

#[plugin_fn]
pub fn consume(input: Vec<u8>) -> FnResult<()> {
    std::hint::black_box(input);
    Ok(())
}

#[no_mangle]
pub extern "C" fn noop() -> i32 {
    0
}
