//! One pull: from the store when it has what the reference needs, else from
//! the registry, keeping what was fetched. A tag is resolved to a digest
//! once (logged), and from there on everything is fetched by digest and
//! checked against it: the manifest (manifests.rs, capped, redirected only
//! within the registry), the layer (by oci-client's verifying stream), and
//! everything read back from the store.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use futures_util::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, RegistryOperation};

use crate::layout::{self, Manifest, ModuleLayer, Packing};
use crate::manifests::{Authorization, Manifests};
use crate::reference::{digest_hex, OciReference};
use crate::store::Store;
use crate::Credentials;

/// `imagePullPolicy`, as Kubernetes, Istio and Higress name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    /// A tag pulled before is not asked for again.
    IfNotPresent,
    /// A tag is resolved at the registry on every load (what it points to
    /// is pulled only if the store does not have it already).
    Always,
}

impl PullPolicy {
    /// The default: `always` for `latest` (or no tag), else
    /// `if_not_present`, as Istio and Higress have it.
    pub fn default_for(reference: &OciReference) -> PullPolicy {
        match (reference.digest(), reference.tag()) {
            (None, Some("latest")) => PullPolicy::Always,
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// How to pull.
#[derive(Clone, Debug)]
pub struct PullSettings {
    /// `None`: [`PullPolicy::default_for`] the reference.
    pub policy: Option<PullPolicy>,
    pub credentials: Credentials,
    /// Plain HTTP instead of HTTPS (a local registry); never implied.
    pub plain_http: bool,
    /// PEM file of CA certificates the registry's certificate may chain to,
    /// besides the system's.
    pub ca_file: Option<PathBuf>,
    /// SHA-256 the image must have: its manifest's digest (as Istio and
    /// Higress check it) or the module's own.
    pub expected_sha256: Option<String>,
    /// Largest layer pulled and module extracted.
    pub max_bytes: u64,
    /// Deadline of the whole pull.
    pub timeout: Duration,
}

impl Default for PullSettings {
    fn default() -> Self {
        PullSettings {
            policy: None,
            credentials: Credentials::default(),
            plain_http: false,
            ca_file: None,
            expected_sha256: None,
            max_bytes: crate::DEFAULT_MAX_BYTES,
            timeout: crate::DEFAULT_TIMEOUT,
        }
    }
}

/// A pulled module, ready to load.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The module's file (in the store).
    pub file: PathBuf,
    /// The module's SHA-256 (hex).
    pub module_sha256: String,
    /// The digest the reference resolved to (what a tag pointed to).
    pub digest: String,
    /// The reference pinned to that digest.
    pub pinned: OciReference,
    /// Whether the registry was asked (false: all from the store).
    pub asked_registry: bool,
}

/// Pulls `reference` into the store at `root`. Every error, from the
/// network's to a layer that holds no module, begins with the reference:
/// this is the one place that names it, whoever asked (a plugin's entry,
/// `call`, `compile`), so the words inside do not repeat it.
pub async fn pull(
    reference: &OciReference,
    settings: &PullSettings,
    root: PathBuf,
) -> Result<Pulled> {
    pull_checked(reference, settings, root)
        .await
        .map_err(|e| anyhow!("{reference}: {e:#}"))
}

async fn pull_checked(
    reference: &OciReference,
    settings: &PullSettings,
    root: PathBuf,
) -> Result<Pulled> {
    let store = Store::new(root);
    let pull = pull_into(reference, settings, &store);
    let pulled = tokio::time::timeout(settings.timeout, pull)
        .await
        .map_err(|_| {
            anyhow!(
                "no answer from the registry in {:?}: check that it is up, or give a slow one longer (`registry.timeout_ms`)",
                settings.timeout
            )
        })??;
    if let Some(expected) = &settings.expected_sha256 {
        ensure!(
            matches_sha256(&pulled, expected),
            "sha256 mismatch: the sha256 given is {expected}; the image is {} and its module sha256:{}: refused (if the image changed on purpose, give its new sha256)",
            pulled.digest,
            pulled.module_sha256
        );
    }
    Ok(pulled)
}

fn matches_sha256(pulled: &Pulled, expected: &str) -> bool {
    let expected = expected.strip_prefix("sha256:").unwrap_or(expected);
    digest_hex(&pulled.digest).is_ok_and(|hex| hex.eq_ignore_ascii_case(expected))
        || pulled.module_sha256.eq_ignore_ascii_case(expected)
}

async fn pull_into(
    reference: &OciReference,
    settings: &PullSettings,
    store: &Store,
) -> Result<Pulled> {
    let policy = settings
        .policy
        .unwrap_or_else(|| PullPolicy::default_for(reference));
    let known = match (reference.digest(), policy) {
        (Some(digest), _) => Some(digest.to_string()),
        (None, PullPolicy::IfNotPresent) => store.tag(reference),
        (None, PullPolicy::Always) => None,
    };
    if let Some(digest) = &known {
        if let Some(pulled) = from_store(reference, digest, store)? {
            let wanted = settings.expected_sha256.as_deref();
            if wanted.is_none_or(|w| matches_sha256(&pulled, w)) {
                return Ok(pulled);
            }
        }
    }
    let registry = Registry::connect(reference, settings).await?;
    let digest = match reference.digest() {
        Some(digest) => digest.to_string(),
        None => {
            let digest = registry.resolve().await?;
            tracing::info!(reference = %reference, %digest, "resolved the tag to a digest");
            digest
        }
    };
    let pulled = match from_store(reference, &digest, store)? {
        Some(pulled) => pulled,
        None => registry.fetch(&digest, store, settings.max_bytes).await?,
    };
    store.keep_tag(reference, &digest)?;
    Ok(Pulled {
        asked_registry: true,
        ..pulled
    })
}

/// The module of `digest` from the store alone, if it has all of it.
fn from_store(reference: &OciReference, digest: &str, store: &Store) -> Result<Option<Pulled>> {
    let Some(layer) = stored_layer(digest, store)? else {
        return Ok(None);
    };
    let module = match layer.packing {
        Packing::Wasm => match store.module_file(digest_hex(&layer.descriptor.digest)?) {
            Some(file) => file,
            None => return Ok(None),
        },
        packing => match store.layer(&layer.descriptor.digest) {
            Some(bytes) => {
                let module = layout::extract(&bytes, packing, u64::MAX)?;
                store.keep_module(&module)?.0
            }
            None => return Ok(None),
        },
    };
    Ok(Some(pulled(reference, digest, module)))
}

fn stored_layer(digest: &str, store: &Store) -> Result<Option<ModuleLayer>> {
    let Some(bytes) = store.manifest(digest) else {
        return Ok(None);
    };
    match Manifest::parse(&bytes)? {
        Manifest::Image(image) => layout::module_layer(&image).map(Some),
        Manifest::Index(index) => stored_layer(&layout::choose_from_index(&index)?, store),
    }
}

fn pulled(reference: &OciReference, digest: &str, file: PathBuf) -> Pulled {
    let module_sha256 = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Pulled {
        file,
        module_sha256,
        digest: digest.to_string(),
        pinned: reference.pinned(digest),
        asked_registry: false,
    }
}

/// Both clients' timeouts and user agent.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const USER_AGENT: &str = concat!("wasmgate/", env!("CARGO_PKG_VERSION"));

/// A registry, authenticated for pulling one repository: oci-client for the
/// token flow and blobs, our own client for manifests (manifests.rs says
/// why).
struct Registry<'a> {
    client: Client,
    manifests: Manifests,
    reference: &'a OciReference,
    /// Whose credentials, for errors.
    who: String,
}

impl<'a> Registry<'a> {
    async fn connect(reference: &'a OciReference, settings: &PullSettings) -> Result<Registry<'a>> {
        // reqwest's rustls takes the process's provider (ring, as for every
        // other TLS connection wasmgate makes); installed once.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientConfig {
            protocol: if settings.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            user_agent: USER_AGENT,
            platform_resolver: None,
            ..ClientConfig::default()
        };
        let ca = match &settings.ca_file {
            Some(ca_file) => Some(Certificate {
                encoding: CertificateEncoding::Pem,
                data: std::fs::read(ca_file).with_context(|| {
                    format!("reading the registry CA file {}", ca_file.display())
                })?,
            }),
            None => None,
        };
        // The Mozilla roots every other client of wasmgate trusts
        // (`wasmgate_base::tls`), not reqwest's platform verifier (the
        // machine's store), and the CA file merged in.
        config.tls_certs_only = (wasmgate_base::tls::public_root_certs().iter())
            .map(|cert| Certificate {
                encoding: CertificateEncoding::Der,
                data: cert.to_vec(),
            })
            .collect();
        config.extra_root_certificates.extend(ca.clone());
        // A client per pull: oci-client keeps the first credentials it is
        // given per registry, and plugins may use different ones.
        let client = Client::new(config);
        let (auth, from) = settings
            .credentials
            .for_registry(reference.registry())
            .await?;
        tracing::debug!(reference = %reference, credentials = %from, "pulling");
        let who = match auth {
            RegistryAuth::Anonymous => "an anonymous pull".to_string(),
            _ => from,
        };
        // Authenticate first, anonymous pulls too (public registries hand
        // them a token): oci-client's later requests drop a failed token
        // exchange silently, which would surface as a bare 401, and the
        // manifests' client needs the token.
        let token = client
            .auth(reference.client_reference(), &auth, RegistryOperation::Pull)
            .await
            .map_err(|e| explain(e, &who))?;
        let authorization = match (token, &auth) {
            (Some(token), _) => Authorization::Bearer(token),
            (None, RegistryAuth::Basic(username, password)) => Authorization::Basic {
                username: username.clone(),
                password: password.clone(),
            },
            (None, _) => Authorization::None,
        };
        let manifests = Manifests::new(
            reference,
            settings.plain_http,
            ca.as_ref(),
            authorization,
            who.clone(),
        )
        .context("the registry's HTTP client")?;
        Ok(Registry {
            client,
            manifests,
            reference,
            who,
        })
    }

    /// The digest the reference's tag points to now.
    async fn resolve(&self) -> Result<String> {
        let tag = self.reference.tag().unwrap_or("latest");
        self.manifests.digest_of_tag(tag).await
    }

    /// Fetches the manifest of `digest` (following an index), then the
    /// layer holding the module, and keeps them.
    async fn fetch(&self, digest: &str, store: &Store, max_bytes: u64) -> Result<Pulled> {
        let mut manifest_digest = digest.to_string();
        let image = loop {
            let bytes = self.manifests.get(&manifest_digest).await?;
            let parsed = Manifest::parse(&bytes)?;
            store.keep_manifest(&manifest_digest, &bytes)?;
            match parsed {
                Manifest::Image(image) => break image,
                Manifest::Index(index) if manifest_digest == digest => {
                    manifest_digest = layout::choose_from_index(&index)?;
                }
                Manifest::Index(_) => bail!("an image index that points to another index"),
            }
        };
        let layer = layout::module_layer(&image)?;
        let size = u64::try_from(layer.descriptor.size).unwrap_or(u64::MAX);
        ensure!(
            size <= max_bytes,
            "the module's layer is {size} bytes, larger than the limit of {max_bytes} bytes"
        );
        let bytes = self.layer(&layer, max_bytes).await?;
        let module = layout::extract(&bytes, layer.packing, max_bytes)?;
        if layer.packing != Packing::Wasm {
            store.keep_layer(&layer.descriptor.digest, &bytes)?;
        }
        let (file, _) = store.keep_module(&module)?;
        Ok(pulled(self.reference, digest, file))
    }

    /// The layer's bytes, at most `max_bytes` whatever its descriptor said,
    /// checked against its digest by oci-client as they arrive. On
    /// oci-client, whose client follows redirects anywhere: registries send
    /// layer downloads to a CDN, which gets no credentials (reqwest drops
    /// them across hosts), and what it sends is capped and checked.
    async fn layer(&self, layer: &ModuleLayer, max_bytes: u64) -> Result<Vec<u8>> {
        let at = self.reference.at_digest(&layer.descriptor.digest);
        let mut stream = self
            .client
            .pull_blob_stream(&at, &layer.descriptor)
            .await
            .map_err(|e| explain(e, &self.who))?
            .stream;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.context("reading the module's layer")?;
            bytes.extend_from_slice(&chunk);
            ensure!(
                bytes.len() as u64 <= max_bytes,
                "the module's layer is larger than the limit of {max_bytes} bytes"
            );
        }
        Ok(bytes)
    }
}

/// oci-client's error, with what it means for the user.
fn explain(e: OciDistributionError, credentials: &str) -> anyhow::Error {
    explain_text(format!("{:#}", anyhow::Error::from(e)), credentials)
}

/// A registry's or the network's error (`text`), with what it means for
/// the user. The network's failures are told apart first: their text
/// carries addresses, and a port such as 29401 must not read as a 401.
pub(crate) fn explain_text(text: String, credentials: &str) -> anyhow::Error {
    let lower = text.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    // An HTTP status is a word of its own ("401 Unauthorized", "status
    // 404"), never part of a number.
    let status = |codes: &[&str]| {
        lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| codes.contains(&word))
    };
    let anonymous = credentials == "an anonymous pull";
    let hint = if says(&["certificate"]) {
        "the registry's TLS certificate is not trusted: give the CA that issued it (`registry.ca_file`, `--registry-ca-file`)".to_string()
    } else if says(&[
        "corrupt message",
        "invalidcontenttype",
        "invalid content type",
        "wrong version number",
        "invalidmessage",
    ]) {
        "the registry did not answer in TLS: if it speaks plain HTTP, say so (`registry.plain_http: true`, `--plain-http`)".to_string()
    } else if says(&[
        "error sending request",
        "tcp connect",
        "connection refused",
        "timed out",
        "dns error",
    ]) {
        "the registry cannot be reached: check that it is up and that the reference names its address".to_string()
    } else if anonymous
        && (status(&["401"]) || says(&["unauthorized", "not authorized", "authentication"]))
    {
        "the registry wants credentials and none were given: give them in `registry` (`username` with `password_env`, or `token_env`), with `--registry-username`, or by `docker login` (Docker's config.json)".to_string()
    } else if status(&["401"]) || says(&["unauthorized", "not authorized", "authentication"]) {
        format!("the registry refused {credentials}")
    } else if status(&["403"]) || says(&["denied"]) {
        format!("the registry denies {credentials} access to the repository")
    } else if status(&["404"])
        || says(&[
            "manifest unknown",
            "manifest_unknown",
            "name unknown",
            "name_unknown",
            "not found",
        ])
    {
        "no such tag, digest or repository in the registry".to_string()
    } else {
        return anyhow!("{text}");
    };
    anyhow!("{hint} ({text})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explained(text: &str, credentials: &str) -> String {
        explain_text(text.to_string(), credentials).to_string()
    }

    /// A refused connection to a registry on port 29401 is a registry that
    /// cannot be reached, not a 401 (a CI run once said "refused").
    #[test]
    fn a_port_number_is_not_an_http_status() {
        let said = explained(
            "error sending request for url (http://127.0.0.1:29401/v2/): client error (Connect): tcp connect error: Connection refused (os error 111)",
            "an anonymous pull",
        );
        assert!(said.starts_with("the registry cannot be reached"), "{said}");
    }

    #[test]
    fn statuses_and_tls_mistakes_say_what_to_do() {
        let anonymous = explained(
            "401 Unauthorized: authentication required",
            "an anonymous pull",
        );
        assert!(anonymous.contains("none were given"), "{anonymous}");
        assert!(anonymous.contains("docker login"), "{anonymous}");
        let refused = explained("status 401: unauthorized", "user `ci` of the node's file");
        assert!(refused.contains("refused user `ci`"), "{refused}");
        let plain = explained(
            "error sending request for url (https://127.0.0.1:5000/v2/): client error (Connect): received corrupt message of type InvalidContentType",
            "an anonymous pull",
        );
        assert!(plain.contains("--plain-http"), "{plain}");
        let missing = explained("404 Not Found: manifest unknown", "an anonymous pull");
        assert!(missing.contains("no such tag"), "{missing}");
    }
}
