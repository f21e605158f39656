//! Header names a filter edits, parsed once per thread rather than per edit.
//!
//! A filter adds or sets the same few names on every request
//! (`x-request-id`, `x-envoy-*`, its own). `HeaderName::from_bytes` checks
//! and lower-cases the name, and for any name outside the standard ones
//! copies it into a fresh allocation: about 300 instructions an edit, three
//! edits a request for the benchmark's Rust filter (`bench/instructions.sh`).
//! A `HeaderName` of such a name shares its bytes, so a copy from this
//! cache is a reference count, not an allocation.
//!
//! The cache is direct-mapped (one slot per hash, the newest name wins) and
//! per thread (no lock); a name is taken from it only when its bytes are
//! exactly the cached name's, which is lower-case and valid, so a hit gives
//! what `from_bytes` would have.

use std::cell::RefCell;

use http::header::{HeaderName, InvalidHeaderName};

const SLOTS: usize = 64;

thread_local! {
    static CACHE: RefCell<[Option<HeaderName>; SLOTS]> = const { RefCell::new([const { None }; SLOTS]) };
}

/// `HeaderName::from_bytes(key)`, from the thread's cache when it holds it.
pub(crate) fn parse(key: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    let slot = slot(key);
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(name) = &cache[slot] {
            if name.as_str().as_bytes() == key {
                return Ok(name.clone());
            }
        }
        let name = HeaderName::from_bytes(key)?;
        cache[slot] = Some(name.clone());
        Ok(name)
    })
}

/// The slot of a name: its length and two of its bytes, which tell apart
/// the few names a filter edits at the cost of a handful of instructions
/// (a hash over every byte cost more than it saved). The last byte, and
/// one from the middle: names share prefixes (`x-`, `access-control-`).
fn slot(key: &[u8]) -> usize {
    let (Some(&last), Some(&middle)) = (key.last(), key.get(key.len() / 2)) else {
        return 0;
    };
    (key.len() * 7 + usize::from(last) * 31 + usize::from(middle)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_name_is_the_name_from_bytes_would_give() {
        for key in [
            &b"x-wasmgate-filter"[..],
            b"X-Wasmgate-Filter",
            b"content-type",
            b"x-b",
        ] {
            let first = parse(key).unwrap();
            let again = parse(key).unwrap();
            assert_eq!(first, HeaderName::from_bytes(key).unwrap());
            assert_eq!(again, first);
        }
    }

    #[test]
    fn names_in_the_same_slot_replace_each_other_and_stay_right() {
        // Fill every slot several times over: each answer still matches.
        let keys: Vec<String> = (0..SLOTS * 4).map(|i| format!("x-name-{i}")).collect();
        for _ in 0..2 {
            for key in &keys {
                assert_eq!(parse(key.as_bytes()).unwrap().as_str(), key);
            }
        }
    }

    #[test]
    fn an_invalid_name_is_refused_every_time() {
        assert!(parse(b"bad name").is_err());
        assert!(parse(b"bad name").is_err());
        assert!(parse(b"").is_err());
    }
}
