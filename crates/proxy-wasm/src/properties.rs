//! `proxy_get_property`: values the embedder set on the exchange (source and
//! destination addresses, connection, route, ...), the plugin's own names, and
//! request/response attributes derived from the header maps.

use crate::headers;
use crate::pairs;
use crate::state::FilterState;

pub(crate) fn get(state: &FilterState, path: &[u8]) -> Option<Vec<u8>> {
    let path = path.strip_suffix(&[0]).unwrap_or(path);
    if let Some(value) = state.exchange.properties.get(path) {
        return Some(value.clone());
    }
    let exchange = &state.exchange;
    let plugin = &state.plugin;
    let request = |name: &[u8]| headers::get(&exchange.request_headers, name).map(<[u8]>::to_vec);
    match pairs::property_path(path).as_slice() {
        [b"plugin_name"] => Some(plugin.config.name.as_bytes().to_vec()),
        [b"plugin_root_id"] => Some(plugin.config.root_id.as_bytes().to_vec()),
        [b"plugin_vm_id"] => Some(plugin.config.vm_id.as_bytes().to_vec()),
        [b"route_name"] => Some(plugin.config.route.as_bytes().to_vec()),
        [b"request", b"headers", name] => request(name),
        [b"request", b"path"] => request(b":path"),
        [b"request", b"url_path"] => {
            request(b":path").map(|p| p.split(|&b| b == b'?').next().unwrap_or_default().to_vec())
        }
        [b"request", b"query"] => request(b":path").map(|p| {
            p.iter()
                .position(|&b| b == b'?')
                .map_or_else(Vec::new, |i| p[i + 1..].to_vec())
        }),
        [b"request", b"method"] => request(b":method"),
        [b"request", b"host"] => request(b":authority"),
        [b"request", b"scheme"] => request(b":scheme"),
        [b"response", b"headers", name] => {
            headers::get(&exchange.response_headers, name).map(<[u8]>::to_vec)
        }
        // Numbers are 8-byte little-endian integers, as Envoy serializes them.
        [b"response", b"code"] => headers::get(&exchange.response_headers, b":status")
            .and_then(|s| std::str::from_utf8(s).ok()?.parse::<i64>().ok())
            .map(|code| code.to_le_bytes().to_vec()),
        _ => None,
    }
}
