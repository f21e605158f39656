//! Benchmark exports: `echo` (output = input), `consume` (reads the input,
//! outputs nothing), `reflect` (sends the input through the host function
//! `extism:host/user::reflect` and outputs what comes back), `noop`.

use extism_pdk::*;

mod host {
    use extism_pdk::*;

    #[host_fn("extism:host/user")]
    extern "ExtismHost" {
        pub fn reflect(input: Vec<u8>) -> Vec<u8>;
    }
}

#[plugin_fn]
pub fn echo(input: Vec<u8>) -> FnResult<Vec<u8>> {
    Ok(input)
}

#[plugin_fn]
pub fn consume(input: Vec<u8>) -> FnResult<()> {
    std::hint::black_box(input);
    Ok(())
}

#[plugin_fn]
pub fn reflect(input: Vec<u8>) -> FnResult<Vec<u8>> {
    Ok(unsafe { host::reflect(input)? })
}

#[no_mangle]
pub extern "C" fn noop() -> i32 {
    0
}
