//! Plugins from OCI registries (docs/plugins.md), from outside: a real
//! registry (CNCF distribution's, built from source) started on a free port,
//! plugins built from source pushed to it with `oras` in the layouts in use
//! (the Wasm OCI artifact, Istio's and Higress's "compat" layer, Higress's
//! image with `plugin.wasm` in its last layer), and pulled by `wasmgate
//! serve`/`call`/`compile`/`check`, a gateway (every plugin kind) and a
//! three-node cluster on etcd: by tag and by digest, with htpasswd, a
//! token service, TLS and Docker's config.json; tags that move; and each
//! failure a user can run into, with the previous version still serving.
//!
//! One module a concern: pulling (by every client, layout and node),
//! credentials, and pulls that must be refused.

mod credentials;
mod pulls;
mod refusals;

use crate::common::gateway::{admin, GatewayProc};
use crate::common::HttpClient;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

const WASM_ARTIFACT: &str = "application/vnd.wasm.content.layer.v1+wasm";
const COMPAT_LAYER: &str = "application/vnd.module.wasm.content.layer.v1+wasm";

/// `wasmgate <args>` with its own cache directory `cache`: what it pulled
/// before is all it knows.
fn wasmgate(cache: &Path, args: &[&str]) -> Output {
    crate::common::wasmgate()
        .env("WASMGATE_CACHE_DIR", cache)
        .args(args)
        .output()
        .expect("running wasmgate")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The `/status` entry of plugin `name`.
async fn plugin_status(c: &HttpClient, gw: &GatewayProc, name: &str) -> Value {
    let status = admin(c, gw, "GET", "/status", "").await.json();
    status["plugins"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no plugin {name} in {status}"))
}
