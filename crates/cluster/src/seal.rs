//! Configuration objects sealed at rest in etcd (`config.encryption`):
//! AES-256-GCM with a random nonce per value and the object's etcd key as
//! associated data, so a sealed value opens only under the key it was
//! written to (a writer cannot move a sealed service into a plugin's place).
//!
//! A sealed value is itself JSON, so the cache file keeps it sealed too:
//!
//! ```text
//! {"sealed":"aes-256-gcm","key":"2026-12","nonce":"<base64>","data":"<base64>"}
//! ```

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Value};
use wasmgate_config::Encryption;

use crate::layout::Objects;

const ALGORITHM: &str = "aes-256-gcm";

/// The node's keys: the first seals, any opens.
pub struct Keyring {
    keys: Vec<(String, LessSafeKey)>,
    random: SystemRandom,
}

impl Keyring {
    /// Reads the keys `encryption` names (files relative to `base`).
    pub fn load(encryption: &Encryption, base: &Path) -> Result<Keyring> {
        let mut keys = Vec::new();
        for key in &encryption.keys {
            let text = match (&key.file, &key.env) {
                (Some(file), _) => {
                    let path = wasmgate_base::paths::resolve(base, file);
                    std::fs::read_to_string(&path).with_context(|| {
                        format!(
                            "config.encryption key `{}`: cannot read {}",
                            key.id,
                            path.display()
                        )
                    })?
                }
                (None, Some(env)) => std::env::var(env).with_context(|| {
                    format!("config.encryption key `{}`: ${env} is not set", key.id)
                })?,
                (None, None) => bail!("config.encryption key `{}`: no `file` or `env`", key.id),
            };
            let bytes = BASE64.decode(text.trim()).map_err(|_| {
                anyhow!(
                    "config.encryption key `{}` is not base64; make one with `head -c 32 /dev/urandom | base64`",
                    key.id
                )
            })?;
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| {
                anyhow!(
                    "config.encryption key `{}` is {} bytes; AES-256 needs 32 (`head -c 32 /dev/urandom | base64`)",
                    key.id,
                    bytes.len()
                )
            })?;
            keys.push((key.id.clone(), LessSafeKey::new(unbound)));
        }
        if keys.is_empty() {
            bail!("config.encryption names no keys");
        }
        Ok(Keyring {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// `plain`, the value of etcd key `key`, sealed with the first key.
    pub fn seal(&self, key: &str, plain: &[u8]) -> Vec<u8> {
        let (id, sealing) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the system's random source");
        let mut data = plain.to_vec();
        sealing
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.as_bytes()),
                &mut data,
            )
            .expect("AES-GCM seals any value under 64 GiB");
        let envelope = json!({
            "sealed": ALGORITHM,
            "key": id,
            "nonce": BASE64.encode(nonce),
            "data": BASE64.encode(data),
        });
        serde_json::to_vec(&envelope).expect("JSON values serialise")
    }

    /// The plain value of etcd key `key`, whose stored value is `stored`.
    pub fn open(&self, key: &str, stored: &[u8]) -> Result<Vec<u8>> {
        let not_sealed = || {
            anyhow!("`{key}` is not sealed with this cluster's keys (`config.encryption`): refused, as anything an etcd writer without a key could have put there; write it with `wasmgate config push --node` or a node's admin API")
        };
        let envelope: Value = serde_json::from_slice(stored).map_err(|_| not_sealed())?;
        if envelope.get("sealed").and_then(Value::as_str) != Some(ALGORITHM) {
            return Err(not_sealed());
        }
        let field = |name: &str| {
            envelope
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(not_sealed)
        };
        let id = field("key")?;
        let Some((_, opening)) = self.keys.iter().find(|(k, _)| k == id) else {
            bail!("`{key}` is sealed with key `{id}`, which this node does not hold (`config.encryption.keys`)");
        };
        let nonce: [u8; NONCE_LEN] = BASE64
            .decode(field("nonce")?)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or_else(not_sealed)?;
        let mut data = BASE64.decode(field("data")?).map_err(|_| not_sealed())?;
        let plain = opening
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.as_bytes()),
                &mut data,
            )
            .map_err(|_| {
                anyhow!("`{key}` does not open with key `{id}`: altered, or sealed for another key")
            })?;
        Ok(plain.to_vec())
    }
}

/// The objects as the configuration reads them: opened when the node has
/// keys, as stored otherwise.
pub fn open_all(keyring: Option<&Keyring>, objects: &Objects) -> Result<Objects> {
    let Some(keyring) = keyring else {
        return Ok(objects.clone());
    };
    objects
        .iter()
        .map(|(key, (revision, stored))| Ok((key.clone(), (*revision, keyring.open(key, stored)?))))
        .collect()
}

/// The value to store under `key`: sealed when the node has keys.
pub fn stored(keyring: Option<&Keyring>, key: &str, plain: Vec<u8>) -> Vec<u8> {
    match keyring {
        Some(keyring) => keyring.seal(key, &plain),
        None => plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgate_config::EncryptionKey;

    fn keyring(ids: &[&str], dir: &Path) -> Keyring {
        let keys = ids
            .iter()
            .map(|id| {
                let file = dir.join(id);
                std::fs::write(&file, BASE64.encode([id.len() as u8; 32])).unwrap();
                EncryptionKey {
                    id: id.to_string(),
                    file: Some(file),
                    env: None,
                }
            })
            .collect();
        Keyring::load(&Encryption { keys }, dir).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_only_under_its_key_and_with_a_key_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let ring = keyring(&["new", "older"], dir.path());
        let sealed = ring.seal("/w/services/db", br#"{"url":"redis://:pw@h"}"#);
        assert!(!String::from_utf8_lossy(&sealed).contains("pw@"));
        assert_eq!(
            ring.open("/w/services/db", &sealed).unwrap(),
            br#"{"url":"redis://:pw@h"}"#
        );
        let moved = ring.open("/w/plugins/db", &sealed).unwrap_err();
        assert!(moved.to_string().contains("does not open"), "{moved}");
        let plain = ring.open("/w/routes/r", br#"{"seq":1}"#).unwrap_err();
        assert!(plain.to_string().contains("not sealed"), "{plain}");
        // Rotation: a ring that holds the old key second still opens it.
        let rotated = keyring(&["newest", "new"], dir.path());
        assert!(rotated.open("/w/services/db", &sealed).is_ok());
        let without = keyring(&["newest"], dir.path());
        let missing = without.open("/w/services/db", &sealed).unwrap_err();
        assert!(missing.to_string().contains("does not hold"), "{missing}");
    }
}
