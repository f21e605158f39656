//! The start of a TLS listener's handshake: the ClientHello is read with
//! rustls's `Acceptor` before the handshake goes on, so that the two
//! refusals rustls words loosely get the alert that says why (RFC 8446
//! §6.2), which clients print ("unrecognized name", "protocol version"):
//!
//! - a server name no certificate of the listener serves, under
//!   `unknown_sni: refuse`: `unrecognized_name` (112), where rustls sends
//!   `access_denied` (49); a client that sends no name at all gets
//!   `handshake_failure` (40): there is no name to be unrecognized;
//! - a client offering only TLS 1.0 or 1.1: `protocol_version` (70), where
//!   rustls sends `handshake_failure`, because it refuses such a hello for
//!   its missing `signature_algorithms` before it looks at the version.
//!
//! Everything else (resumption, ALPN, client certificates) is rustls's
//! handshake, continued from the hello it has already read.

use std::io;
use std::sync::Arc;

use rustls::server::Acceptor;
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::StartHandshake;

/// The error a refused name is counted under (`unknown_sni`), in rustls's
/// own words for it.
pub(crate) const NO_CERTIFICATE: &str = "no server certificate chain resolved";

const HANDSHAKE_FAILURE: u8 = 40;
const PROTOCOL_VERSION: u8 = 70;
const UNRECOGNIZED_NAME: u8 = 112;

/// Completes a TLS handshake on `stream` with `config`, or refuses it with
/// the alert that says why.
pub(crate) async fn handshake(
    mut stream: TcpStream,
    config: Arc<ServerConfig>,
) -> io::Result<TlsStream<TcpStream>> {
    let mut acceptor = Acceptor::default();
    let mut head = RecordHead::default();
    let mut buf = [0u8; 2048];
    let accepted = loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.note(&buf[..n]);
        let mut unread = &buf[..n];
        while !unread.is_empty() {
            if acceptor.read_tls(&mut unread)? == 0 {
                return Err(io::Error::other(
                    "the TLS hello's buffer took no more bytes",
                ));
            }
        }
        match acceptor.accept() {
            Ok(None) => continue,
            Ok(Some(accepted)) => break accepted,
            Err((error, mut alert)) => {
                if let Some(version) = head.old_client_version() {
                    refuse(&mut stream, version, PROTOCOL_VERSION).await;
                } else {
                    let mut bytes = Vec::new();
                    let _ = alert.write(&mut bytes);
                    let _ = stream.write_all(&bytes).await;
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
        }
    };
    let hello = accepted.client_hello();
    let named = hello.server_name().is_some();
    if config.cert_resolver.resolve(hello).is_none() {
        let alert = if named {
            UNRECOGNIZED_NAME
        } else {
            HANDSHAKE_FAILURE
        };
        refuse(&mut stream, TLS12_RECORD, alert).await;
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::General(NO_CERTIFICATE.into()),
        ));
    }
    StartHandshake::from_parts(accepted, stream)
        .into_stream(config)
        .await
}

/// The record version of alerts to clients of TLS 1.2 and 1.3 (TLS 1.3
/// keeps 1.2's on the wire).
const TLS12_RECORD: [u8; 2] = [3, 3];

/// Writes a fatal alert `description` as a plaintext record of `version`
/// (the handshake never reached encryption) and shuts the write side.
async fn refuse(stream: &mut TcpStream, version: [u8; 2], description: u8) {
    let record = [0x15, version[0], version[1], 0, 2, 2, description];
    let _ = stream.write_all(&record).await;
    let _ = stream.shutdown().await;
}

/// The first bytes of the connection, as far as the ClientHello's version:
/// record type and version (3), length (2), handshake type (1), length (3),
/// `legacy_version` (2).
#[derive(Default)]
struct RecordHead {
    bytes: [u8; 11],
    len: usize,
}

impl RecordHead {
    fn note(&mut self, read: &[u8]) {
        let take = read.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + take].copy_from_slice(&read[..take]);
        self.len += take;
    }

    /// The record version to answer in, when the connection began with a
    /// ClientHello from a client of TLS 1.1 or older (whose
    /// `legacy_version` is below 1.2's; a TLS 1.3 client says 1.2 there).
    fn old_client_version(&self) -> Option<[u8; 2]> {
        let b = &self.bytes;
        let hello = self.len == b.len() && b[0] == 0x16 && b[5] == 1;
        let version = u16::from_be_bytes([b[9], b[10]]);
        (hello && (0x0300..0x0303).contains(&version)).then_some([b[1], b[2]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> RecordHead {
        let mut head = RecordHead::default();
        // In two reads, as a slow client sends it.
        let (a, b) = bytes.split_at(bytes.len() / 2);
        head.note(a);
        head.note(b);
        head
    }

    #[test]
    fn only_a_hello_below_tls_1_2_is_an_old_client() {
        let tls10 = b"\x16\x03\x01\x00\x80\x01\x00\x00\x7c\x03\x01rest";
        assert_eq!(head(tls10).old_client_version(), Some([3, 1]));
        let tls11 = b"\x16\x03\x01\x00\x80\x01\x00\x00\x7c\x03\x02";
        assert_eq!(head(tls11).old_client_version(), Some([3, 1]));
        // TLS 1.2, and 1.3 (whose legacy_version is 1.2's).
        let tls12 = b"\x16\x03\x01\x00\x80\x01\x00\x00\x7c\x03\x03";
        assert_eq!(head(tls12).old_client_version(), None);
        // Not a hello, or too short to say.
        assert_eq!(head(b"GET / HTTP/1.1\r\n").old_client_version(), None);
        assert_eq!(head(b"\x16\x03\x01").old_client_version(), None);
    }
}
