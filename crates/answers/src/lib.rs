//! The answers the gateway makes itself, Envoy's "local replies": a failure
//! as an HTTP status with a JSON body that names its kind
//! (`error_response.rs`: a plugin's crash, a timeout, no route, an upstream
//! down, a body too large), and the same answer as a gRPC status when the
//! client speaks gRPC, with the `grpc-timeout` deadline kept (`grpc.rs`).
//! It knows no routes, filters or connections: the gateway and `serve`
//! decide when to answer, this crate how.

pub mod error_response;
pub mod grpc;
