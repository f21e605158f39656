//! The error catalogue: the mistakes users make most often, each made
//! through the CLI as a user would make it, and each message held to the
//! rule of docs/architecture.md ("Errors"): it says what was tried, on
//! which file, field or reference, why it failed, and what to do.

use std::path::Path;

use crate::common::{plugin, wasmgate};

/// One entry: what the user does, and the parts the message must have.
struct Mistake {
    what: &'static str,
    /// The command's arguments; `{dir}` is the case's directory.
    args: Vec<String>,
    /// The configuration file written first (`{dir}/gw.yaml`), if any.
    file: Option<String>,
    /// Which file, field or reference failed (and what was tried).
    subject: String,
    why: &'static str,
    what_to_do: &'static str,
}

fn check_file(dir: &Path, yaml: &str) -> (Vec<String>, Option<String>) {
    let file = dir.join("gw.yaml").display().to_string();
    (
        vec!["check".into(), "-c".into(), file],
        Some(yaml.to_string()),
    )
}

#[test]
fn every_error_says_what_was_tried_on_what_why_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("notes.txt.wasm"), "just some text\n").unwrap();
    let hello = plugin("hello").display().to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mistake =
        |what, (args, file): (Vec<String>, Option<String>), subject: &str, why, what_to_do| {
            Mistake {
                what,
                args,
                file,
                subject: subject.to_string(),
                why,
                what_to_do,
            }
        };
    let catalogue = [
        mistake(
            "no configuration file",
            (vec!["run".into(), "-c".into(), d.join("nope.yaml").display().to_string()], None),
            "nope.yaml",
            "cannot read",
            "`-c FILE` names another",
        ),
        mistake(
            "a misspelt section",
            check_file(d, "listen: 127.0.0.1:0\nrouts: []\n"),
            "gw.yaml: routs",
            "unknown field `routs`",
            "did you mean `routes`?",
        ),
        mistake(
            "a route to an upstream that is not declared",
            check_file(d, "upstreams: [{name: backend, nodes: [{address: \"127.0.0.1:9\"}]}]\nroutes: [{name: r, upstream: nowhere}]\n"),
            "gw.yaml: routes[r].upstream",
            "no upstream named `nowhere`",
            "declare it there, or name one of `backend`",
        ),
        mistake(
            "a filter naming a plugin that is not declared",
            check_file(d, "routes: [{name: r, plugins: [{plugin: ghost}], respond: {}}]\n"),
            "gw.yaml: routes[r].plugins[0].plugin",
            "no plugin named `ghost`",
            "declare it there",
        ),
        mistake(
            "a plugin file that is not there",
            check_file(d, "plugins: [{name: p, wasm: missing.wasm}]\nroutes: [{name: r, respond: {}}]\n"),
            "gw.yaml: plugins[p]",
            "no file",
            "resolved against the configuration's directory",
        ),
        mistake(
            "a plugin file that is not wasm",
            check_file(d, "plugins: [{name: p, wasm: notes.txt.wasm}]\nroutes: [{name: r, respond: {}}]\n"),
            "gw.yaml: plugins[p]: ",
            "notes.txt.wasm: not a WebAssembly module",
            "check that the path names the .wasm file a build produced",
        ),
        mistake(
            "a module whose sha256 is not the one given",
            check_file(d, &format!("plugins: [{{name: p, wasm: \"{hello}\", sha256: \"{}\"}}]\nroutes: [{{name: r, respond: {{}}}}]\n", "0".repeat(64))),
            "gw.yaml: plugins[p]",
            "sha256 mismatch",
            "give its new sha256",
        ),
        mistake(
            "a certificate file that is not there",
            check_file(d, "listeners: [{address: \"127.0.0.1:0\", tls: {}}]\ncertificates: [{name: c, cert: shop.pem, key: shop-key.pem}]\nroutes: [{name: r, respond: {}}]\n"),
            "gw.yaml: certificates[c]: cannot read",
            "No such file",
            "resolved against the configuration's directory",
        ),
        mistake(
            "a registry that is down",
            check_file(d, &format!("plugins: [{{name: p, wasm: \"oci://127.0.0.1:{refused}/fn/hello:1\", registry: {{plain_http: true}}}}]\nroutes: [{{name: r, respond: {{}}}}]\n")),
            &format!("gw.yaml: plugins[p]: oci://127.0.0.1:{refused}/fn/hello:1: "),
            "the registry cannot be reached",
            "check that it is up",
        ),
        mistake(
            "an address another process listens on",
            (vec!["run".into(), "-c".into(), d.join("gw.yaml").display().to_string()],
             Some(format!("listen: \"{taken}\"\nroutes: [{{name: r, respond: {{}}}}]\n"))),
            "gw.yaml: listen: cannot listen on",
            "Address already in use",
            "change the address",
        ),
        mistake(
            "a function the plugin does not export",
            (vec!["call".into(), hello.clone(), "nosuch".into()], None),
            "nosuch",
            "Function not found",
            "the plugin exports: hello",
        ),
    ];
    for m in catalogue {
        if let Some(yaml) = &m.file {
            std::fs::write(d.join("gw.yaml"), yaml).unwrap();
        }
        let out = wasmgate()
            .args(&m.args)
            .current_dir(d)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{}: succeeded: {said}", m.what);
        for (part, text) in [
            ("what and where", m.subject.as_str()),
            ("why", m.why),
            ("what to do", m.what_to_do),
        ] {
            assert!(
                said.contains(text),
                "{}: the message lacks {part} ({text:?}):\n{said}",
                m.what
            );
        }
    }
}
