//! One HTTP request/response as filters see it: header maps with HTTP/2-style
//! pseudo-headers (`:method`, `:path`, `:authority`, `:scheme`, `:status`),
//! bodies, trailers, properties, and the local response a filter may send.

use std::collections::BTreeMap;

use crate::pairs::Pairs;

#[derive(Clone, Debug, Default)]
pub struct HttpExchange {
    pub request_headers: Pairs,
    pub request_body: Vec<u8>,
    pub request_trailers: Pairs,
    pub response_headers: Pairs,
    pub response_body: Vec<u8>,
    pub response_trailers: Pairs,
    /// Values for `proxy_get_property`, keyed by the NUL-joined path
    /// (`request\0path`); filters add their own with `proxy_set_property`.
    pub properties: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Set by `proxy_send_local_response`: answer with this, skip the upstream.
    pub local_response: Option<LocalResponse>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalResponse {
    pub status: u32,
    pub details: String,
    pub headers: Pairs,
    pub body: Vec<u8>,
}

impl HttpExchange {
    pub fn set_property(&mut self, path: &[&str], value: impl Into<Vec<u8>>) {
        self.properties
            .insert(path.join("\0").into_bytes(), value.into());
    }
}
