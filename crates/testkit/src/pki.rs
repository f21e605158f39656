//! Certificates made at test time with the `openssl` command: a CA of the
//! test's own, server certificates it signs (ECDSA P-256 or RSA 2048, the
//! names a test wants in subjectAltName, a serial of the test's choosing so
//! a reload can be told apart), and client certificates for mTLS. Files
//! live in a temporary directory that goes with the `Pki`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use tempfile::TempDir;

/// The key type of a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    EcdsaP256,
    Rsa2048,
}

/// A certificate's PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Issued {
    pub fn cert_pem(&self) -> String {
        std::fs::read_to_string(&self.cert).expect("reading the certificate")
    }

    pub fn key_pem(&self) -> String {
        std::fs::read_to_string(&self.key).expect("reading the key")
    }
}

/// A test CA and what it issued.
pub struct Pki {
    dir: TempDir,
    /// The CA's certificate, for clients to trust (`--cacert`, `ca_file`,
    /// `client_ca`).
    pub ca: PathBuf,
    ca_key: PathBuf,
    files: AtomicU32,
}

impl Pki {
    /// A new CA (ECDSA P-256, valid a day) named `name`.
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-pki-")
            .tempdir()
            .expect("a temporary directory");
        let (ca, ca_key) = (dir.path().join("ca.pem"), dir.path().join("ca-key.pem"));
        let key_args = key_args(KeyType::EcdsaP256);
        openssl(
            Command::new("openssl")
                .args(["req", "-x509", "-nodes", "-days", "1"])
                .args(key_args.iter())
                .args(["-subj", &format!("/CN={name}")])
                .args(["-addext", "basicConstraints=critical,CA:TRUE"])
                .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                .arg("-keyout")
                .arg(&ca_key)
                .arg("-out")
                .arg(&ca),
        );
        Pki {
            dir,
            ca,
            ca_key,
            files: AtomicU32::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `names` (DNS names, `*.` wildcards allowed;
    /// an IP address as `IP:1.2.3.4`), with serial `serial`, valid `days`.
    pub fn server(&self, names: &[&str], key: KeyType, serial: u64, days: u32) -> Issued {
        let san = names
            .iter()
            .map(|n| {
                if n.starts_with("IP:") {
                    n.to_string()
                } else {
                    format!("DNS:{n}")
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        self.issue(
            names[0],
            key,
            serial,
            days,
            &format!("subjectAltName={san}\nextendedKeyUsage=serverAuth"),
        )
    }

    /// A client certificate with subject `CN=<common_name>` and the URI SAN
    /// `uri`.
    pub fn client(&self, common_name: &str, uri: &str) -> Issued {
        self.issue(
            common_name,
            KeyType::EcdsaP256,
            1,
            1,
            &format!("subjectAltName=URI:{uri}\nextendedKeyUsage=clientAuth"),
        )
    }

    fn issue(
        &self,
        common_name: &str,
        key: KeyType,
        serial: u64,
        days: u32,
        extensions: &str,
    ) -> Issued {
        let n = self.files.fetch_add(1, Ordering::Relaxed);
        let base = self.dir.path().join(format!("issued-{n}"));
        let (key_file, csr, cert, ext) = (
            base.with_extension("key.pem"),
            base.with_extension("csr"),
            base.with_extension("pem"),
            base.with_extension("ext"),
        );
        std::fs::write(
            &ext,
            format!("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n{extensions}\n"),
        )
        .expect("writing the extensions file");
        openssl(
            Command::new("openssl")
                .args(["req", "-new", "-nodes"])
                .args(key_args(key).iter())
                .args(["-subj", &format!("/CN={common_name}/O=wasmgate tests")])
                .arg("-keyout")
                .arg(&key_file)
                .arg("-out")
                .arg(&csr),
        );
        openssl(
            Command::new("openssl")
                .args(["x509", "-req", "-days", &days.to_string()])
                .args(["-set_serial", &serial.to_string()])
                .arg("-in")
                .arg(&csr)
                .arg("-CA")
                .arg(&self.ca)
                .arg("-CAkey")
                .arg(&self.ca_key)
                .arg("-extfile")
                .arg(&ext)
                .arg("-out")
                .arg(&cert),
        );
        Issued {
            cert,
            key: key_file,
        }
    }
}

fn key_args(key: KeyType) -> Vec<&'static str> {
    match key {
        KeyType::EcdsaP256 => vec!["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        KeyType::Rsa2048 => vec!["-newkey", "rsa:2048"],
    }
}

fn openssl(command: &mut Command) {
    let output = command.stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("cannot run openssl ({e}): install it with scripts/install-deps.sh")
    });
    assert!(
        output.status.success(),
        "openssl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
