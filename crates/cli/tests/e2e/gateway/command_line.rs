//! `wasmgate check` and `wasmgate run` from the command line: errors named by
//! file and field, the bundled example, a missing file, and `--listen` /
//! `--admin` winning over the file's, with busy ports named by their setting.

use crate::common::gateway::{get, send};
use crate::common::{client, wasmgate};
use std::time::{Duration, Instant};

#[test]
fn check_explains_config_and_plugin_errors_with_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |yaml: &str| {
        let path = dir.path().join("gw.yaml");
        std::fs::write(&path, crate::common::gateway::render(yaml, 1, 2)).unwrap();
        path
    };
    let check = |path: &std::path::Path| {
        let out = wasmgate().args(["check", "-c"]).arg(path).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // A typo in a field name, with a suggestion; the problems after it are
    // reported too (the route's other reference, another route's).
    let path = write(
        "routes:\n  - name: r\n    upstrem: x\n    plugins: [{plugin: nope}]\n  - {name: s, upstream: missing}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "gw.yaml: routes[r].upstrem: unknown field `upstrem` (did you mean `upstream`?), expected one of"
        ) && stderr.contains("at line 3 column 5"),
        "{stderr}"
    );
    assert!(
        stderr.contains("gw.yaml: routes[r].plugins[0].plugin: no plugin named `nope`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("gw.yaml: routes[s].upstream: no upstream named `missing`"),
        "{stderr}"
    );
    // References, patterns, and several errors at once.
    let path = write(
        "upstreams: [{name: u, nodes: [{address: nowhere}]}]\nroutes:\n  - name: r\n    upstream: v\n    path: {regex: '('}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("upstreams[u].nodes[0].address: `nowhere` is not host:port"),
        "{stderr}"
    );
    assert!(
        stderr.contains("routes[r].upstream: no upstream named `v`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("routes[r].path.regex: invalid regex"),
        "{stderr}"
    );
    // Plugins: missing file (absolute, and relative: shown resolved against
    // the configuration's directory), not wasm, and a conf the plugin refuses.
    let path = write(
        "plugins:\n  - {name: gone, wasm: /no/such.wasm}\n  - {name: rel, wasm: mods/f.wasm}\n  - {name: cfg, wasm: \"{wasm:http_config}\"}\nroutes:\n  - {name: r, plugins: [{plugin: cfg}], respond: {}}\n",
    );
    let (code, stderr, _) = check(&path);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("plugins[gone]: cannot read /no/such.wasm"),
        "{stderr}"
    );
    let resolved = dir.path().join("mods/f.wasm");
    assert!(
        stderr.contains(&format!(
            "plugins[rel]: no file {}: `mods/f.wasm` is resolved against the configuration's directory",
            resolved.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("routes[r].plugins[0]"), "{stderr}");
    assert!(
        stderr.contains("proxy_on_configure returned false"),
        "{stderr}"
    );
    // A good one.
    let path = write(
        "plugins:\n  - {name: h, wasm: \"{wasm:add_header}\"}\n  - {name: g, wasm: \"{wasm:go_add_header}\"}\n  - {name: hello, wasm: \"{wasm:hello}\"}\nroutes:\n  - {name: r, plugins: [{plugin: h}, {plugin: g}], respond: {}}\n",
    );
    let (code, stderr, stdout) = check(&path);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("plugin h: proxy-wasm 0.2.1"), "{stdout}");
    assert!(stdout.contains("plugin g: proxy-wasm 0.2.0"), "{stdout}");
    assert!(stdout.contains("plugin hello: extism"), "{stdout}");
}

#[test]
fn bundled_example_config_checks_strictly_and_quietly() {
    // Its filters are built with the SDKs, which import every function of
    // the ABI (gRPC calls, foreign functions): nothing to warn about.
    let example = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/gateway/wasmgate.yaml");
    let out = wasmgate()
        .args(["check", "--strict", "-c"])
        .arg(&example)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("warn") && !stderr.contains("error"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok ("));
}

#[test]
fn run_without_a_file_says_how_to_name_one() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["run", "check"] {
        let out = wasmgate()
            .arg(command)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("wasmgate.yaml: cannot read")
                && stderr.contains(&format!("hint: `wasmgate {command}` reads ./wasmgate.yaml unless `-c FILE` names another")),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_admin_given_on_the_command_line_win_and_busy_ports_name_their_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gw.yaml");
    // The file's own addresses are taken: only the overrides can serve.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    std::fs::write(
        &file,
        format!("listen: {busy}\nadmin: {busy}\nroutes:\n  - {{name: r, respond: {{body: hi}}}}\n"),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        wasmgate()
            .args(["run", "--no-cache", "-c"])
            .arg(&file)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("gw.yaml: listen: cannot listen on {busy}"))
            && stderr.contains("give `--listen HOST:PORT`"),
        "{stderr}"
    );
    let listen = format!("127.0.0.1:{}", crate::common::free_port());
    let out = run(&["--listen", &listen]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("gw.yaml: admin: cannot listen on {busy}"))
            && stderr.contains("`--admin HOST:PORT`"),
        "{stderr}"
    );
    let out = run(&[
        "--listen",
        &busy,
        "--admin",
        &format!("127.0.0.1:{}", crate::common::free_port()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--listen: cannot listen on {busy}")),
        "{stderr}"
    );
    // Both given: it serves there, and a reload of the file keeps them.
    let admin = format!("127.0.0.1:{}", crate::common::free_port());
    let mut child = wasmgate()
        .args(["run", "--no-cache", "-c"])
        .arg(&file)
        .args(["--listen", &listen, "--admin", &admin])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let c = client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "not listening on {listen}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get(&c, &format!("http://{listen}/")).await.text(), "hi");
    let status = send(
        &c,
        "POST",
        &format!("http://{admin}/reload"),
        &[("x-wasmgate-admin", "1")],
        "",
    )
    .await;
    assert_eq!(status.status, 200, "{}", status.text());
    assert_eq!(get(&c, &format!("http://{listen}/")).await.text(), "hi");
    child.kill().unwrap();
    child.wait().unwrap();
}
