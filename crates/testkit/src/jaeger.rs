//! Jaeger (v1.76.0's `cmd/jaeger`, built from the Go module proxy by
//! `scripts/install-deps.sh` into `target/test-bin`) for the tracing tests:
//! OTLP receivers over gRPC and over HTTP (both with TLS when asked) and the
//! query API on free loopback ports, traces kept in memory. What a test asks the query API (`/api/traces/{id}`,
//! `/api/traces?service=...`) it asks over real HTTP, as a user's browser
//! would.

use std::process::{Child, Command};

use crate::{free_port, read_log};

pub struct JaegerServer {
    otlp_port: u16,
    otlp_http_port: u16,
    /// `https` when the receivers speak TLS.
    scheme: &'static str,
    query_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl JaegerServer {
    /// Starts Jaeger and waits until its receivers and query API listen.
    pub fn start() -> JaegerServer {
        JaegerServer::start_with(None)
    }

    /// The same, its OTLP receivers behind TLS with `certificate`.
    pub fn start_tls(certificate: &crate::pki::Issued) -> JaegerServer {
        JaegerServer::start_with(Some(certificate))
    }

    fn start_with(certificate: Option<&crate::pki::Issued>) -> JaegerServer {
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-jaeger-")
            .tempdir()
            .expect("creating a temporary directory for Jaeger");
        let (otlp_port, otlp_http_port) = (free_port(), free_port());
        let (query_port, query_grpc_port) = (free_port(), free_port());
        let tls = certificate.map_or(String::new(), |c| {
            format!(
                "\n        tls:\n          cert_file: {}\n          key_file: {}",
                c.cert.display(),
                c.key.display()
            )
        });
        let config = format!(
            r#"
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  # Jaeger's own telemetry off: left on, it exports its own spans to
  # 127.0.0.1:4317 (a port a test may use) and waits ~10 s at exit to
  # flush them.
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_port}{tls}
      http:
        endpoint: 127.0.0.1:{otlp_http_port}{tls}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#
        );
        std::fs::write(dir.path().join("jaeger.yaml"), config).expect("writing jaeger.yaml");
        let child = crate::spawn_logged(
            Command::new(crate::test_bin("jaeger"))
                .args(["--config", "jaeger.yaml"])
                .env("OTEL_TRACES_EXPORTER", "none")
                .current_dir(dir.path()),
            &dir.path().join("jaeger.log"),
        );
        let mut server = JaegerServer {
            otlp_port,
            otlp_http_port,
            scheme: if certificate.is_some() {
                "https"
            } else {
                "http"
            },
            query_port,
            dir,
            child: Some(child),
        };
        server.wait_until_listening();
        server
    }

    /// The OTLP/gRPC endpoint a gateway exports to.
    pub fn otlp_endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.otlp_port)
    }

    /// The OTLP/HTTP endpoint (`/v1/traces` is added by the exporter).
    pub fn otlp_http_endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.otlp_http_port)
    }

    /// The query API's base URL (`http://127.0.0.1:PORT/api`).
    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}/api", self.query_port)
    }

    /// What Jaeger has logged.
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("jaeger.log"))
    }

    fn wait_until_listening(&mut self) {
        let ports = [self.otlp_port, self.otlp_http_port, self.query_port];
        let log = self.dir.path().join("jaeger.log");
        let child = self.child.as_mut().expect("started");
        crate::wait_listening(child, &ports, "Jaeger", || read_log(&log));
    }
}

impl Drop for JaegerServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
