//! What wasmgate reads of an X.509 certificate (with `x509-parser`, the
//! well-kept parser of the Rusticata project): the names a server
//! certificate covers, a client certificate's subject and URI names for
//! filters (`connection.subject_peer_certificate`, ...), and when it
//! expires, for operators.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

pub struct Facts {
    /// As RFC 4514 writes a distinguished name (`CN=a,O=b,C=c`: the last
    /// attribute of the certificate's sequence first), as Envoy gives it.
    pub subject: String,
    /// Seconds since the epoch.
    pub not_after: i64,
    /// subjectAltName DNS names (wildcards kept) and URIs.
    pub dns_names: Vec<String>,
    pub uri_names: Vec<String>,
}

impl Facts {
    pub fn of(der: &CertificateDer<'_>) -> Result<Facts, String> {
        let (_, cert) = X509Certificate::from_der(der.as_ref())
            .map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let mut dns_names = Vec::new();
        let mut uri_names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => dns_names.push(dns.to_string()),
                    GeneralName::URI(uri) => uri_names.push(uri.to_string()),
                    _ => {}
                }
            }
        }
        Ok(Facts {
            subject: rfc4514(cert.subject()),
            not_after: cert.validity().not_after.timestamp(),
            dns_names,
            uri_names,
        })
    }
}

/// `name` as RFC 4514 text: relative names last-first, joined by `,`; the
/// attributes of one by `+`; types by their short names (else the dotted
/// OID), values escaped (a value that is no string type as `#` and hex).
fn rfc4514(name: &x509_parser::x509::X509Name<'_>) -> String {
    use x509_parser::objects::{oid2abbrev, oid_registry};
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let kind = oid2abbrev(attribute.attr_type(), oid_registry())
                        .map(str::to_string)
                        .unwrap_or_else(|_| attribute.attr_type().to_id_string());
                    let value = match attribute.as_str() {
                        Ok(text) => escape_value(text),
                        Err(_) => format!(
                            "#{}",
                            wasmgate_base::hex::encode(attribute.attr_value().data)
                        ),
                    };
                    format!("{kind}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 4514 section 2.4's escapes.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_value;

    #[test]
    fn values_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape_value("wasmgate tests"), "wasmgate tests");
        assert_eq!(escape_value("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_value(" #x "), "\\ #x\\ ");
        assert_eq!(escape_value("#x"), "\\#x");
    }
}
