//! Manifests and image indexes, fetched by wasmgate's own HTTP client.
//!
//! Why not oci-client's (0.18): it reads a manifest's body whole however
//! large it is (`pull_manifest_raw`, and `fetch_manifest_digest` when a
//! registry's HEAD has no digest), and its HTTP client follows redirects to
//! any host; neither can be configured. A registry, or whatever answers in
//! its name, could make a pull hold any amount of memory or send it to
//! another server. So this much of the protocol is ours: a HEAD or GET of
//! `/v2/<repository>/manifests/<tag or digest>`, authorised with the token
//! oci-client's token flow obtained (`Client::auth`) or else basic auth,
//! read chunk by chunk up to [`MAX_MANIFEST_BYTES`], checked against the
//! digest asked for, and redirected only within the registry (the same
//! scheme, host and port) at most [`MAX_REDIRECTS`] times.
//!
//! Blobs stay oci-client's: registries legitimately redirect layer
//! downloads to a CDN (another host, which gets no credentials), and a
//! layer is capped and checked against its digest as it arrives (pull.rs).

use anyhow::{anyhow, bail, Result};
use oci_client::client::Certificate;
use reqwest::header::{HeaderValue, ACCEPT};
use reqwest::{redirect, Method, RequestBuilder, Response, StatusCode};
use sha2::{Digest, Sha256};

use crate::layout;
use crate::pull::explain_text;
use crate::reference::{digest_hex, OciReference};

/// Largest manifest or image index read. A plugin's is a few KiB (an
/// image with many platforms, tens of KiB); containerd caps manifests at
/// 4 MiB too.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// Redirects followed within the registry for one manifest.
pub const MAX_REDIRECTS: usize = 3;

/// The header a registry names a manifest's digest in.
const DIGEST_HEADER: &str = "docker-content-digest";

/// What a manifest request is authorised with.
pub(crate) enum Authorization {
    None,
    /// The token flow's token (or the configuration's token).
    Bearer(String),
    Basic {
        username: String,
        password: String,
    },
}

/// One repository's manifests at its registry.
pub(crate) struct Manifests {
    http: reqwest::Client,
    /// `http(s)://registry/v2/repository/manifests/`.
    base: String,
    authorization: Authorization,
    /// Whose credentials, for errors ("user `ci` from the configuration").
    who: String,
}

impl Manifests {
    /// `ca` is the extra root the registry's certificate may chain to, as
    /// oci-client's client is given it; the timeouts and user agent are its
    /// too.
    pub(crate) fn new(
        reference: &OciReference,
        plain_http: bool,
        ca: Option<&Certificate>,
        authorization: Authorization,
        who: String,
    ) -> Result<Manifests> {
        let mut builder = reqwest::Client::builder()
            .redirect(redirect::Policy::custom(within_the_registry))
            .connect_timeout(crate::pull::CONNECT_TIMEOUT)
            .read_timeout(crate::pull::READ_TIMEOUT)
            .user_agent(crate::pull::USER_AGENT);
        if let Some(ca) = ca {
            builder = builder.tls_certs_merge([reqwest::Certificate::try_from(ca)?]);
        }
        let scheme = if plain_http { "http" } else { "https" };
        let registry = reference.client_reference().resolve_registry();
        Ok(Manifests {
            http: builder.build()?,
            base: format!(
                "{scheme}://{registry}/v2/{}/manifests/",
                reference.repository()
            ),
            authorization,
            who,
        })
    }

    /// The digest `tag` points to now: the registry's `Docker-Content-Digest`
    /// of a HEAD, or else (a registry that does not send it) the SHA-256 of
    /// the manifest a GET reads.
    pub(crate) async fn digest_of_tag(&self, tag: &str) -> Result<String> {
        let response = self.send(Method::HEAD, tag).await?;
        match response.headers().get(DIGEST_HEADER) {
            Some(digest) => {
                let digest = digest.to_str().unwrap_or_default();
                digest_hex(digest)
                    .map_err(|e| anyhow!("the registry's digest for the tag: {e:#}"))?;
                Ok(digest.to_string())
            }
            None => {
                let response = self.send(Method::GET, tag).await?;
                let bytes = self.read(response, tag).await?;
                Ok(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
            }
        }
    }

    /// The manifest (or image index) `digest`, checked against it.
    pub(crate) async fn get(&self, digest: &str) -> Result<Vec<u8>> {
        let wanted = digest_hex(digest)?;
        let response = self.send(Method::GET, digest).await?;
        let bytes = self.read(response, digest).await?;
        let got = hex::encode(Sha256::digest(&bytes));
        if !got.eq_ignore_ascii_case(wanted) {
            bail!(
                "the registry answered the manifest {digest} with bytes whose digest is sha256:{got}: refused (a registry serves the bytes a digest names; this one, or something between it and wasmgate, altered them); check the registry, or pull by another reference"
            );
        }
        Ok(bytes)
    }

    /// `method` on the manifest `tag_or_digest`: a 200 answer, or an error
    /// saying why not.
    async fn send(&self, method: Method, tag_or_digest: &str) -> Result<Response> {
        let url = format!("{}{tag_or_digest}", self.base);
        let accept = HeaderValue::from_str(&layout::MANIFEST_TYPES.join(", "))?;
        let request = self
            .http
            .request(method.clone(), &url)
            .header(ACCEPT, accept);
        let response = match self.authorise(request).send().await {
            Ok(response) => response,
            // The policy's own words (which host, what to do) are the
            // error's source; reqwest's "error following redirect" adds
            // nothing.
            Err(e) if e.is_redirect() => {
                let why = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
                bail!("{method} {url}: {why}");
            }
            Err(e) => {
                let text = format!("{method} {url}: {:#}", anyhow::Error::from(e));
                return Err(explain_text(text, &self.who));
            }
        };
        let status = response.status();
        if status == StatusCode::OK {
            return Ok(response);
        }
        // The registry's error envelope (`MANIFEST_UNKNOWN`, `DENIED`...)
        // says why, when there is one; a glimpse of it is enough.
        let body = match method {
            Method::HEAD => Vec::new(),
            _ => self.read(response, tag_or_digest).await.unwrap_or_default(),
        };
        let body = String::from_utf8_lossy(&body[..body.len().min(512)]);
        let text = format!("{method} {url}: {status} {}", body.trim());
        Err(explain_text(text.trim_end().to_string(), &self.who))
    }

    fn authorise(&self, request: RequestBuilder) -> RequestBuilder {
        match &self.authorization {
            Authorization::None => request,
            Authorization::Bearer(token) => request.bearer_auth(token),
            Authorization::Basic { username, password } => {
                request.basic_auth(username, Some(password))
            }
        }
    }

    /// The body, chunk by chunk, refused past [`MAX_MANIFEST_BYTES`]
    /// (announced or sent).
    async fn read(&self, mut response: Response, tag_or_digest: &str) -> Result<Vec<u8>> {
        let too_large = || {
            anyhow!(
                "the manifest {tag_or_digest} is larger than the limit of {MAX_MANIFEST_BYTES} bytes: refused (a plugin's manifest is a few KiB; check that the reference names a plugin image, and the registry)"
            )
        };
        if response
            .content_length()
            .is_some_and(|length| length > MAX_MANIFEST_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(bytes),
                Err(e) => {
                    let text = format!(
                        "reading the manifest {tag_or_digest}: {:#}",
                        anyhow::Error::from(e)
                    );
                    return Err(explain_text(text, &self.who));
                }
            };
            if bytes.len() + chunk.len() > MAX_MANIFEST_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
    }
}

/// The redirect policy of manifest requests: within the registry (the same
/// scheme, host and port as the request's first URL), at most
/// [`MAX_REDIRECTS`] times; anything else is refused before it is sent, so
/// the other host is never asked (nor given a token).
fn within_the_registry(attempt: redirect::Attempt) -> redirect::Action {
    let registry = attempt.previous()[0].origin();
    let next = attempt.url().origin();
    if next != registry {
        let (to, from) = (next.ascii_serialization(), registry.ascii_serialization());
        attempt.error(format!(
            "the registry at {from} redirected the manifest request to {to}, another host: refused (wasmgate reads manifests from the registry itself only; layers may come from elsewhere, as they are checked against the manifest's digests); pull from a registry, or a mirror, that serves its manifests itself"
        ))
    } else if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error(format!(
            "the registry redirected the manifest request more than {MAX_REDIRECTS} times: refused"
        ))
    } else {
        attempt.follow()
    }
}
