//! A Kubernetes API server for the Kubernetes tests, as controller-runtime's
//! envtest runs one: kube-apiserver v1.34.2 (built from the Go module proxy
//! by `scripts/install-deps.sh` into `target/test-bin`) on a free loopback
//! port, its storage an [`EtcdServer`] of its own, a serving certificate
//! from a test CA, a generated service-account key, and static bearer
//! tokens. No controller-manager or kubelet: a test creates the
//! EndpointSlices a Service would get. The Gateway API CRDs (v1.5.1,
//! standard channel) are in `target/test-bin/gateway-api-crds`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::pki::{KeyType, Pki};
use crate::{free_port, read_log, test_bin, EtcdServer, START_TIMEOUT};

pub struct KubeApiServer {
    port: u16,
    pki: Pki,
    serving: crate::pki::Issued,
    admin_token: String,
    dir: tempfile::TempDir,
    etcd: EtcdServer,
    child: Option<Child>,
}

/// A Gateway API CRD file (`gatewayclasses`, `gateways`, `httproutes`, ...).
pub fn gateway_api_crd(plural: &str) -> PathBuf {
    test_bin("gateway-api-crds").join(format!("gateway.networking.k8s.io_{plural}.yaml"))
}

impl KubeApiServer {
    /// Starts etcd and the API server; returns once `/readyz` says ready.
    pub fn start() -> KubeApiServer {
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-kube-")
            .tempdir()
            .expect("creating a temporary directory for kube-apiserver");
        let etcd = EtcdServer::start();
        let pki = Pki::new("kube-apiserver test CA");
        let serving = pki.server(&["IP:127.0.0.1", "localhost"], KeyType::EcdsaP256, 1, 1);
        let sa_key = dir.path().join("sa.key");
        let sa_pub = dir.path().join("sa.pub");
        run(Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&sa_key));
        run(Command::new("openssl")
            .args(["rsa", "-pubout", "-in"])
            .arg(&sa_key)
            .arg("-out")
            .arg(&sa_pub));
        let admin_token = format!("admin-{}", std::process::id());
        std::fs::write(
            dir.path().join("tokens.csv"),
            format!("{admin_token},admin,admin-uid,\"system:masters\"\n"),
        )
        .expect("writing tokens.csv");
        let mut server = KubeApiServer {
            port: free_port(),
            pki,
            serving,
            admin_token,
            dir,
            etcd,
            child: None,
        };
        server.child = Some(server.spawn());
        server.wait_until_ready();
        server
    }

    /// The API server's process, on its port, etcd and files.
    fn spawn(&self) -> Child {
        let (dir, port) = (self.dir.path(), self.port);
        crate::spawn_logged(
            Command::new(test_bin("kube-apiserver"))
                .arg(format!("--etcd-servers={}", self.etcd.url()))
                .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
                .arg(format!("--secure-port={port}"))
                .arg(format!("--cert-dir={}", dir.display()))
                .arg(format!("--tls-cert-file={}", self.serving.cert.display()))
                .arg(format!(
                    "--tls-private-key-file={}",
                    self.serving.key.display()
                ))
                .arg(format!(
                    "--service-account-issuer=https://127.0.0.1:{port}/"
                ))
                .arg(format!(
                    "--service-account-key-file={}",
                    dir.join("sa.pub").display()
                ))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    dir.join("sa.key").display()
                ))
                .arg(format!(
                    "--token-auth-file={}",
                    dir.join("tokens.csv").display()
                ))
                .args([
                    "--authorization-mode=RBAC",
                    "--service-cluster-ip-range=10.0.0.0/24",
                    "--allow-privileged=true",
                    "--disable-admission-plugins=ServiceAccount",
                    "--enable-priority-and-fairness=false",
                    "--profiling=false",
                ]),
            &dir.join("kube-apiserver.log"),
        )
    }

    /// Starts a killed API server again, on the same port and etcd (what
    /// it stored is kept); returns once it is ready.
    pub fn start_again(&mut self) {
        self.kill();
        self.child = Some(self.spawn());
        self.wait_until_ready();
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn ca(&self) -> &Path {
        &self.pki.ca
    }

    /// A kubeconfig for the `system:masters` user, written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        self.kubeconfig_as(dir, "kubeconfig", &self.admin_token)
    }

    /// A kubeconfig (file `name` in `dir`) for whoever `token` says: a
    /// ServiceAccount's token, to run with exactly its rights.
    pub fn kubeconfig_as(&self, dir: &Path, name: &str, token: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: test\n  context: {{cluster: test, user: admin, namespace: default}}\ncurrent-context: test\n",
                self.url(),
                self.ca().display(),
                token
            ),
        )
        .expect("writing the kubeconfig");
        path
    }

    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("kube-apiserver.log"))
    }

    /// The etcd the API server stores in.
    pub fn etcd(&self) -> &EtcdServer {
        &self.etcd
    }

    fn ready(&self) -> bool {
        Command::new("curl")
            .args(["-sf", "--max-time", "2", "--cacert"])
            .arg(self.ca())
            .arg(format!("{}/readyz", self.url()))
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "kube-apiserver exited with {status} while starting:\n{}",
                    self.log()
                );
            }
            if self.ready() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver was not ready within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the API server (SIGKILL): an API server that goes away.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn run(command: &mut Command) {
    let out = command.output().expect("running openssl");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
