//! `reflect`: sends the input through the host function
//! `extism:host/user::reflect` (which the embedder provides) and outputs what
//! comes back; measures the cost of a host-function round trip with data.

use extism_pdk::*;

mod host {
    use extism_pdk::*;

    #[host_fn("extism:host/user")]
    extern "ExtismHost" {
        pub fn reflect(input: Vec<u8>) -> Vec<u8>;
    }
}

#[plugin_fn]
pub fn reflect(input: Vec<u8>) -> FnResult<Vec<u8>> {
    Ok(unsafe { host::reflect(input)? })
}
