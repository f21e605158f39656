//! TLS clients for tests: `curl` (SNI by `--resolve`, HTTP/2 by ALPN) and
//! `openssl s_client`, and the YAML of a certificate made by the testkit's
//! `Pki`.

use std::path::Path;
use std::process::{Command, Stdio};

use wasmgate_testkit::pki::Issued;

/// The YAML of a certificate entry for `issued`.
pub fn certificate(name: &str, issued: &Issued) -> String {
    format!(
        r#"{{name: {name}, cert: "{}", key: "{}"}}"#,
        issued.cert.display(),
        issued.key.display()
    )
}

/// What `curl` got: status, HTTP version, response headers, body.
pub struct Curled {
    pub ok: bool,
    pub status: u16,
    pub version: String,
    pub headers: String,
    pub body: String,
    pub stderr: String,
}

impl Curled {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// `curl https://<host>:<port><path>` reaching 127.0.0.1 (`--resolve`, so
/// the SNI is `host`), trusting `ca`, with `args`.
pub fn curl(host: &str, port: u16, path: &str, ca: &Path, args: &[&str]) -> Curled {
    let dir = tempfile::tempdir().unwrap();
    let (headers, body) = (dir.path().join("headers"), dir.path().join("body"));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--resolve"])
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg("--cacert")
        .arg(ca)
        .arg("-D")
        .arg(&headers)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{http_version}"])
        .args(args)
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .expect("curl (scripts/install-deps.sh installs it)");
    let written = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, version) = written.split_once(' ').unwrap_or(("0", ""));
    Curled {
        ok: out.status.success(),
        status: status.parse().unwrap_or(0),
        version: version.to_string(),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        body: std::fs::read_to_string(&body).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `openssl s_client` to 127.0.0.1:`port` with `args`, sending `input`;
/// whether it succeeded, and everything it printed.
pub fn s_client(port: u16, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new("timeout")
        .args(["20", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}
