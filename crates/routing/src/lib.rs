//! A route's own rules, as Envoy's route configuration holds them: which
//! route a request takes ([`router`]: host, path, method, headers, query,
//! scheme and port, found through an index) and the changes a route makes
//! to a request and its answer before any filter or endpoint sees them
//! ([`header_edits`], [`url_rewrite`], [`cors`]). Each is parsed once when
//! a route is built and applied per request; none knows filters, endpoints
//! or the connection. The gateway's request path (`wasmgate-gateway`'s
//! `proxy.rs`) calls them in order.

pub mod cors;
pub mod header_edits;
pub mod router;
pub mod url_rewrite;
