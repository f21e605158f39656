//! `oci://registry[:port]/repository[:tag][@sha256:digest]`: a plugin in
//! an OCI registry, as Higress's and Istio's `WasmPlugin` name one. The part
//! after `oci://` is an ordinary image reference (parsed by oci-client's
//! `Reference`, the distribution grammar); a reference without a tag or a
//! digest means `:latest`, as `docker pull` has it.

use std::fmt;

use anyhow::{bail, Context, Result};

pub const SCHEME: &str = "oci://";

/// Whether `wasm` names a module in an OCI registry.
pub fn is_oci(wasm: &str) -> bool {
    wasm.starts_with(SCHEME)
}

/// A parsed `oci://` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciReference {
    inner: oci_client::Reference,
}

impl OciReference {
    pub fn parse(text: &str) -> Result<OciReference> {
        let Some(rest) = text.strip_prefix(SCHEME) else {
            bail!("`{text}` is not an OCI reference: it begins with `{SCHEME}`");
        };
        if !rest.contains('/') {
            // "oci://name:tag" would be read as Docker Hub's library/name,
            // which is never where a plugin is: ask for the registry.
            bail!(
                "`{text}`: name the registry, `oci://registry[:port]/repository[:tag|@sha256:...]`"
            );
        }
        let inner: oci_client::Reference = rest
            .parse()
            .with_context(|| format!("`{text}` is not an image reference (`oci://registry[:port]/repository[:tag|@sha256:...]`)"))?;
        if let Some(digest) = inner.digest() {
            digest_hex(digest).with_context(|| format!("`{text}`"))?;
        }
        Ok(OciReference { inner })
    }

    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The tag, if the reference names one (`latest` when it names neither
    /// a tag nor a digest).
    pub fn tag(&self) -> Option<&str> {
        match (self.inner.tag(), self.inner.digest()) {
            (Some(tag), _) => Some(tag),
            (None, None) => Some("latest"),
            (None, Some(_)) => None,
        }
    }

    /// The digest, if the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The same image pinned to `digest` (its tag kept for people to read):
    /// what a cluster node is given, so every node pulls the same bytes.
    pub fn pinned(&self, digest: &str) -> OciReference {
        let inner = match self.tag() {
            Some(tag) => oci_client::Reference::with_tag_and_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                tag.to_string(),
                digest.to_string(),
            ),
            None => oci_client::Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.to_string(),
            ),
        };
        OciReference { inner }
    }

    /// `registry/repository:tag`, the key a tag's last digest is kept under.
    pub(crate) fn tag_key(&self) -> Option<String> {
        let tag = self.tag()?;
        Some(format!("{}/{}:{tag}", self.registry(), self.repository()))
    }

    pub(crate) fn client_reference(&self) -> &oci_client::Reference {
        &self.inner
    }

    /// The reference to fetch `digest` of this repository by.
    pub(crate) fn at_digest(&self, digest: &str) -> oci_client::Reference {
        oci_client::Reference::with_digest(
            self.registry().to_string(),
            self.repository().to_string(),
            digest.to_string(),
        )
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry(), self.repository())?;
        if let Some(tag) = self.inner.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.inner.digest() {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// The hex of a `sha256:` digest (the only algorithm registries use for
/// manifests and layers in practice; file names in the store are made of it).
pub fn digest_hex(digest: &str) -> Result<&str> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        bail!("digest `{digest}`: only sha256 digests are supported");
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("digest `{digest}` is not `sha256:` and 64 hex digits");
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:3b18e512dba79e4c8300dd08aeb37f8e728b8dad6ad8f9b9b5b3e0d6e6e2b1a4";

    #[test]
    fn parses_tags_digests_and_ports() {
        let r = OciReference::parse("oci://127.0.0.1:5000/plugins/auth:1.2.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "plugins/auth");
        assert_eq!(r.tag(), Some("1.2.0"));
        assert_eq!(r.digest(), None);
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/plugins/auth:1.2.0");

        let r = OciReference::parse(&format!("oci://ghcr.io/acme/auth@{DIGEST}")).unwrap();
        assert_eq!((r.tag(), r.digest()), (None, Some(DIGEST)));

        let r = OciReference::parse("oci://registry.example.com/auth").unwrap();
        assert_eq!(r.tag(), Some("latest"));
    }

    #[test]
    fn pinning_keeps_the_tag_and_adds_the_digest() {
        let r = OciReference::parse("oci://127.0.0.1:5000/plugins/auth:1.2.0").unwrap();
        let pinned = r.pinned(DIGEST);
        assert_eq!(
            pinned.to_string(),
            format!("oci://127.0.0.1:5000/plugins/auth:1.2.0@{DIGEST}")
        );
        assert_eq!(OciReference::parse(&pinned.to_string()).unwrap(), pinned);
    }

    #[test]
    fn refuses_what_is_not_a_registry_reference() {
        for bad in [
            "http://example.com/a.wasm",
            "oci://auth:1.0",
            "oci://reg.example.com/UPPER:1",
            "oci://reg.example.com/auth@sha256:abc",
            "oci://reg.example.com/auth@md5:0123456789abcdef0123456789abcdef",
        ] {
            assert!(OciReference::parse(bad).is_err(), "{bad} was accepted");
        }
    }
}
