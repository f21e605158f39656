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

pub fn add(map: &mut Pairs, key: &[u8], value: &[u8]) {
    map.push((key.to_ascii_lowercase(), value.to_vec()));
}

/// Replaces every value of `key` with `value` (adds it if absent).
pub fn replace(map: &mut Pairs, key: &[u8], value: &[u8]) {
    match map.iter().position(|(k, _)| k.eq_ignore_ascii_case(key)) {
        Some(first) => {
            map[first].1 = value.to_vec();
            let mut i = first + 1;
            while i < map.len() {
                if map[i].0.eq_ignore_ascii_case(key) {
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
        add(&mut m, b"X-A", b"2");
        assert_eq!(get(&m, b"X-a"), Some(&b"1"[..]));
        replace(&mut m, b"x-A", b"3");
        assert_eq!(m, vec![(b"x-a".to_vec(), b"3".to_vec())]);
        replace(&mut m, b"new", b"v");
        remove(&mut m, b"X-A");
        assert_eq!(m, vec![(b"new".to_vec(), b"v".to_vec())]);
    }
}
