//! An OCI registry (CNCF distribution v3.1.2's `registry`, built from the Go
//! module proxy by `scripts/install-deps.sh` into `target/test-bin`) on a
//! free loopback port with its storage in a temporary directory, and `oras`
//! (v1.3.6, built the same way) to push plugins to it as users do: the Wasm
//! OCI artifact, and Higress's image layout.
//!
//! Authentication, when asked: htpasswd (HTTP basic; bcrypt, the only hash
//! the registry accepts), or the bearer-token flow, where the registry
//! (distribution's `silly` access controller) challenges with a token realm
//! the test serves itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::{free_port, read_log, test_bin};

#[derive(Default)]
pub struct RegistryOptions {
    /// Who may push and pull, and how the registry asks.
    pub auth: Auth,
    /// TLS with this certificate, and the CA that issued it (for `oras`).
    pub tls: Option<(crate::pki::Issued, PathBuf)>,
}

#[derive(Default)]
pub enum Auth {
    #[default]
    Anyone,
    /// HTTP basic auth with this user and password (htpasswd).
    Htpasswd { user: String, password: String },
    /// The bearer-token flow: tokens from `service` (whose user and
    /// password `oras` pushes with).
    Token(TokenService),
}

pub struct RegistryServer {
    port: u16,
    options: RegistryOptions,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RegistryServer {
    /// A registry anyone may push to and pull from, over plain HTTP.
    pub fn start() -> RegistryServer {
        RegistryServer::start_with(RegistryOptions::default())
    }

    pub fn start_with(options: RegistryOptions) -> RegistryServer {
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-registry-")
            .tempdir()
            .expect("creating a temporary directory for the registry");
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        );
        if let Some((tls, _)) = &options.tls {
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                tls.cert.display(),
                tls.key.display()
            );
        }
        if let Auth::Htpasswd { user, password } = &options.auth {
            let hash = bcrypt::hash(password, 5).expect("hashing the password");
            std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n"))
                .expect("writing htpasswd");
            config += &format!(
                "auth:\n  htpasswd:\n    realm: wasmgate-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            );
        }
        if let Auth::Token(service) = &options.auth {
            config += &format!(
                "auth:\n  silly:\n    realm: {}\n    service: wasmgate-test\n",
                service.realm()
            );
        }
        std::fs::write(dir.path().join("config.yml"), config).expect("writing config.yml");
        let child = crate::spawn_logged(
            Command::new(test_bin("registry"))
                .args(["serve", "config.yml"])
                .current_dir(dir.path())
                // Its OpenTelemetry exporter would try to reach a collector.
                .env("OTEL_TRACES_EXPORTER", "none"),
            &dir.path().join("registry.log"),
        );
        let mut server = RegistryServer {
            port,
            options,
            dir,
            child: Some(child),
        };
        server.wait_until_listening();
        server
    }

    /// `127.0.0.1:PORT`, the registry part of a reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("registry.log"))
    }

    /// Pushes `module` as the Wasm OCI artifact (`oras push` with a layer of
    /// `media_type`) to `repository:tag`; returns the manifest's digest.
    /// `note` goes into an annotation: the same module pushed again with
    /// another note is another manifest (a tag that moves).
    pub fn push_wasm(&self, target: &str, module: &Path, media_type: &str, note: &str) -> String {
        let staged = self.stage(module, "module.wasm");
        self.oras_push(
            target,
            &[
                "--artifact-type",
                "application/vnd.wasm.config.v1+json",
                "--annotation",
                &format!("org.wasmgate.test.note={note}"),
                &format!("{}:{media_type}", staged.display()),
            ],
        )
    }

    /// Pushes `module` as Higress publishes its plugins: a spec and a
    /// README layer, then `plugin.tar.gz` (a gzipped tar holding
    /// `plugin.wasm`) as the last layer, of an image layer's type.
    pub fn push_higress_image(&self, target: &str, module: &Path, note: &str) -> String {
        let work = self.dir.path().join(format!("image-{note}"));
        std::fs::create_dir_all(&work).expect("creating the image's directory");
        std::fs::copy(module, work.join("plugin.wasm")).expect("copying the module");
        let tar = Command::new("tar")
            .args(["-czf", "plugin.tar.gz", "plugin.wasm"])
            .current_dir(&work)
            .status()
            .expect("running tar");
        assert!(tar.success(), "tar failed");
        std::fs::write(
            work.join("spec.yaml"),
            format!("apiVersion: 1.0.0\ninfo:\n  title: {note}\n"),
        )
        .expect("writing spec.yaml");
        std::fs::write(work.join("README.md"), format!("# {note}\n")).expect("writing README.md");
        let layer =
            |file: &str, media_type: &str| format!("{}:{media_type}", work.join(file).display());
        self.oras_push(
            target,
            &[
                &layer("spec.yaml", "application/vnd.module.wasm.spec.v1+yaml"),
                &layer("README.md", "application/vnd.module.wasm.doc.v1+markdown"),
                &layer(
                    "plugin.tar.gz",
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                ),
            ],
        )
    }

    /// Pushes a single file of `media_type` (a layer that is not a module).
    pub fn push_file(&self, target: &str, file: &Path, media_type: &str) -> String {
        let staged = self.stage(file, "content");
        self.oras_push(target, &[&format!("{}:{media_type}", staged.display())])
    }

    fn stage(&self, file: &Path, name: &str) -> PathBuf {
        let staged = self.dir.path().join("staged").join(name);
        std::fs::create_dir_all(staged.parent().expect("a directory")).expect("staging");
        std::fs::copy(file, &staged).expect("staging the file");
        staged
    }

    /// `oras push` with this registry's transport and credentials.
    fn oras_push(&self, target: &str, args: &[&str]) -> String {
        let mut command = Command::new(test_bin("oras"));
        command
            .args([
                "push",
                "--disable-path-validation",
                "--format",
                "go-template={{.digest}}",
            ])
            .arg(format!("{}/{target}", self.host()))
            .args(args)
            .env("HOME", self.dir.path());
        match &self.options.tls {
            Some((_, ca)) => command.arg("--ca-file").arg(ca),
            None => command.arg("--plain-http"),
        };
        match &self.options.auth {
            Auth::Anyone => {}
            Auth::Htpasswd { user, password } => {
                command.args(["--username", user, "--password", password]);
            }
            Auth::Token(service) => {
                command.args(["--username", &service.user, "--password", &service.password]);
            }
        }
        let output = command.output().unwrap_or_else(|e| {
            panic!(
                "running {} (scripts/install-deps.sh builds it): {e}",
                test_bin("oras").display()
            )
        });
        assert!(
            output.status.success(),
            "oras push {target} failed: {}\nregistry log:\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        let digest = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(digest.starts_with("sha256:"), "oras printed {digest:?}");
        digest
    }

    fn wait_until_listening(&mut self) {
        let ports = [self.port];
        let log = self.dir.path().join("registry.log");
        let child = self.child.as_mut().expect("started");
        crate::wait_listening(child, &ports, "the registry", || read_log(&log));
    }

    /// Stops the registry: a registry that is down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A registry's token service (the `realm` of a `Bearer` challenge): it
/// answers `GET /token?scope=...&service=...` with a token when the request
/// carries this user's password (HTTP basic), 401 otherwise, and counts
/// both.
pub struct TokenService {
    pub user: String,
    pub password: String,
    port: u16,
    issued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl TokenService {
    pub fn start(user: &str, password: &str) -> TokenService {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::Ordering;
        let port = free_port();
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("binding the token service");
        let expected = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{user}:{password}"),
        );
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (issued_by_thread, refused_by_thread) = (issued.clone(), refused.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("cloning the stream"));
                let mut authorized = false;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    if let Some((name, value)) = line.trim_end().split_once(':') {
                        if name.eq_ignore_ascii_case("authorization") {
                            let value = value.trim();
                            authorized = value
                                .get(..6)
                                .is_some_and(|s| s.eq_ignore_ascii_case("basic "))
                                && value.get(6..) == Some(expected.as_str());
                        }
                    }
                    line.clear();
                }
                let reply = if authorized {
                    let n = issued_by_thread.fetch_add(1, Ordering::SeqCst);
                    let body = format!("{{\"token\":\"token-{n}\",\"access_token\":\"token-{n}\",\"expires_in\":300}}");
                    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                } else {
                    refused_by_thread.fetch_add(1, Ordering::SeqCst);
                    let body = r#"{"errors":[{"code":"UNAUTHORIZED","message":"wrong user or password"}]}"#;
                    format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        TokenService {
            user: user.to_string(),
            password: password.to_string(),
            port,
            issued,
            refused,
        }
    }

    pub fn realm(&self) -> String {
        format!("http://127.0.0.1:{}/token", self.port)
    }

    /// Tokens handed out so far.
    pub fn issued(&self) -> usize {
        self.issued.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests refused (wrong or no credentials) so far.
    pub fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }
}
