//! Header-map edits with the semantics the ABI gives them: names compare
//! case-insensitively and are stored lower-case, as HTTP/2 requires.

use crate::pairs::Pairs;

pub fn get<'a>(map: &'a Pairs, key: &[u8]) -> Option<&'a [u8]> {
    map.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_slice())
}

pub fn remove(map: &mut Pairs, key: &[u8]) {
    map.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
}

/// Adds a value. Key and value are taken owned: the host reads them out of
/// the guest's memory anyway, and copying them again cost two allocations
/// per edit.
pub fn add(map: &mut Pairs, mut key: Vec<u8>, value: Vec<u8>) {
    key.make_ascii_lowercase();
    map.push((key, value));
}

/// Replaces every value of `key` with `value` (adds it if absent).
pub fn replace(map: &mut Pairs, key: Vec<u8>, value: Vec<u8>) {
    match map.iter().position(|(k, _)| k.eq_ignore_ascii_case(&key)) {
        Some(first) => {
            map[first].1 = value;
            let mut i = first + 1;
            while i < map.len() {
                if map[i].0.eq_ignore_ascii_case(&key) {
                    map.remove(i);
                } else {
                    i += 1;
                }
            }
        }
        None => add(map, key, value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_ignore_case() {
        let mut m: Pairs = vec![(b"x-a".to_vec(), b"1".to_vec())];
        add(&mut m, b"X-A".to_vec(), b"2".to_vec());
        assert_eq!(get(&m, b"X-a"), Some(&b"1"[..]));
        replace(&mut m, b"x-A".to_vec(), b"3".to_vec());
        assert_eq!(m, vec![(b"x-a".to_vec(), b"3".to_vec())]);
        replace(&mut m, b"NEW".to_vec(), b"v".to_vec());
        remove(&mut m, b"X-A");
        assert_eq!(m, vec![(b"new".to_vec(), b"v".to_vec())]);
    }
}
