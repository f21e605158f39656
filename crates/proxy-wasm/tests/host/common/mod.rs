//! Set-up shared by the tests that drive hand-written filter modules.

#![allow(dead_code)] // each test file uses its part

use std::sync::Arc;

use wasmgate_proxy_wasm::{
    FilterConfig, FilterError, FilterPlugin, Headers, HttpExchange, Runtime,
};

/// WAT of the allocator most hand-written filters need: a bump allocator,
/// exported as `proxy_on_memory_allocate`, that hands out memory from
/// `$start` up and never frees it (a test's streams are few). It is a global
/// and a function, so it goes after the module's imports (WAT wants them
/// before any definition), spliced in with `concat!`:
/// `concat!(r#"(module (memory (export "memory") 1) "#, bump_allocator!(1024), r#" ...)"#)`.
macro_rules! bump_allocator {
    ($start:literal) => {
        concat!(
            r#"(global $bump (mut i32) (i32.const "#,
            $start,
            r#"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $bump))
    (global.set $bump (i32.add (global.get $bump) (local.get $n)))
    (local.get $p))"#
        )
    };
}
pub(crate) use bump_allocator;

/// Loads a hand-written module (WAT) with `config`; the tests' modules are
/// meant to load, so failing to is the test's failure.
pub async fn filter_from_wat(rt: &Runtime, wat: &str, config: FilterConfig) -> Arc<FilterPlugin> {
    FilterPlugin::new(rt, wat.as_bytes(), config).await.unwrap()
}

/// A header map from text, in order.
pub fn pairs(items: &[(&str, &str)]) -> Headers {
    Headers::from_pairs(
        items
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
    )
}

/// One stream through `filter`: the request's headers (the whole request),
/// then its end (log, done, delete). Returns the exchange as the filter
/// left it.
pub async fn headers_then_finish(
    filter: &Arc<FilterPlugin>,
    request_headers: Headers,
) -> Result<Box<HttpExchange>, FilterError> {
    let mut exchange = Box::new(HttpExchange {
        request_headers,
        ..HttpExchange::default()
    });
    let mut stream = filter.stream().await?;
    stream.on_request_headers(&mut exchange, true).await?;
    stream.finish(&mut exchange).await?;
    Ok(exchange)
}
