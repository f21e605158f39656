//! The names the translation gives entries of the node's configuration
//! (routes, upstreams, plugins, certificates): made from the resources'
//! namespaces and names, within the configuration's rule for names.

/// A name within the configuration's rule (64 characters at most): long
/// ones keep their start and a hash of the whole.
pub(crate) fn entry_name(full: &str) -> String {
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.len() <= 64 {
        return clean;
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(full.as_bytes())[..6]);
    format!("{}-{hash}", &clean[..51])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_keep_their_start_and_a_hash() {
        let long = entry_name(&"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, entry_name(&"x".repeat(101)));
    }
}
