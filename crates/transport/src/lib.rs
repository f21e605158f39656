//! How connections come in and go out; nothing here knows routes, filters
//! or plugins (it imports no plugin ABI: what a TLS handshake told travels
//! as `wasmgate_base::tls::TlsInfo`).
//!
//! - Inbound: [`listener`] accepts connections on every listener (HTTP/1.1
//!   and h2c, told apart by the preface; over TLS, [`tls`], with HTTP/2 by
//!   ALPN, the ClientHello read first by `tls_accept`) on worker threads;
//!   plain HTTP/1.1 is read and written by `http1_server` in the
//!   connection's task (the rest is hyper's), with `head_deadline` guarding
//!   the first request head of a connection hyper serves, [`admission`] counting each
//!   listener's connections against its cap, `stream_watch` closing idle
//!   HTTP/2 connections and those whose client cancels most of its
//!   streams, and graceful shutdown.
//! - Outbound: [`node_pool`] keeps each upstream node's keep-alive
//!   connections and sends requests on them (a request without a body to
//!   an HTTP/1.1 node through `http1_client`, in the request's own task);
//!   [`connector`] dials them,
//!   counting each node's open connections; [`tls_client`] encrypts them
//!   for an upstream with `tls`; `held_writes` lets an HTTP/2
//!   connection's HEADERS and DATA leave in one write. The `wasmgate-upstream` crate (balancing,
//!   retries, health) sends through a node's pool and knows nothing else of
//!   connections.
//! - [`body`]: the body types requests and responses travel in;
//!   `http1_framing` is what both HTTP/1.1 codecs share.

pub mod admission;
pub mod body;
pub mod connector;
mod head_deadline;
mod held_writes;
mod http1_client;
mod http1_framing;
mod http1_server;
mod lazy_deadline;
pub mod listener;
pub mod node_pool;
mod stream_watch;
pub mod tls;
mod tls_accept;
pub mod tls_client;
mod x509;
