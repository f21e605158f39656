//! How connections come in and go out; nothing here knows routes, filters
//! or plugins.
//!
//! - Inbound: [`listener`] accepts connections on every listener (HTTP/1.1
//!   and h2c, told apart by the preface; over TLS, [`tls`], with HTTP/2 by
//!   ALPN, the ClientHello read first by [`tls_accept`]) on worker threads, with [`head_deadline`] guarding a new
//!   connection's first request head, [`admission`] counting each
//!   listener's connections against its cap, `stream_watch` closing idle
//!   HTTP/2 connections and those whose client cancels most of its
//!   streams, and graceful shutdown.
//! - Outbound: [`node_pool`] keeps each upstream node's keep-alive
//!   connections and sends requests on them; [`connector`] dials them,
//!   counting each node's open connections; [`tls_client`] encrypts them
//!   for an upstream with `tls`; [`held_writes`] lets an HTTP/2
//!   connection's HEADERS and DATA leave in one write. The upstream module (balancing,
//!   retries, health) sends through a node's pool and knows nothing else of
//!   connections.

pub mod admission;
pub(crate) mod connector;
pub(crate) mod head_deadline;
pub(crate) mod held_writes;
pub mod listener;
pub(crate) mod node_pool;
pub(crate) mod stream_watch;
pub mod tls;
pub(crate) mod tls_accept;
pub(crate) mod tls_client;
pub(crate) mod x509;
