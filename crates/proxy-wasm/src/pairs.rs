//! The Proxy-Wasm wire formats for header maps and property paths.
//!
//! A header map travels as: the number of pairs (u32), then each pair's key
//! and value lengths (u32 each), then each key and value followed by a NUL.
//! All integers are little-endian. A property path is its segments joined by
//! NUL bytes.

/// Header names and values as bytes: HTTP allows non-UTF-8 values.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

pub fn encode<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<u8> {
    encode_iter(pairs.len(), || {
        pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    })
}

/// The same for `count` pairs that `pairs` lists (twice: sizes, then bytes).
pub fn encode_iter<'a, I>(count: usize, pairs: impl Fn() -> I) -> Vec<u8>
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    let data: usize = pairs().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = Vec::with_capacity(4 + count * 8 + data);
    out.extend_from_slice(&(count as u32).to_le_bytes());
    for (k, v) in pairs() {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs() {
        out.extend_from_slice(k);
        out.push(0);
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

/// Why a guest's serialized map was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed header map: {0}")]
pub struct Malformed(&'static str);

/// Decodes a map the guest serialized; every length is checked against the
/// buffer, so a hostile map is an error, not a read past its end.
pub fn decode(bytes: &[u8]) -> Result<Pairs, Malformed> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let word = |at: usize| -> Result<usize, Malformed> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or(Malformed("truncated size table"))
    };
    let count = word(0)?;
    let table_end = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .filter(|&end| end <= bytes.len())
        .ok_or(Malformed("more pairs than bytes"))?;
    let mut pairs = Vec::with_capacity(count);
    let mut at = table_end;
    for i in 0..count {
        let key_len = word(4 + i * 8)?;
        let value_len = word(8 + i * 8)?;
        let key = take(bytes, &mut at, key_len)?;
        let value = take(bytes, &mut at, value_len)?;
        pairs.push((key.to_vec(), value.to_vec()));
    }
    Ok(pairs)
}

/// `len` bytes at `*at` followed by a NUL; advances past both.
fn take<'a>(bytes: &'a [u8], at: &mut usize, len: usize) -> Result<&'a [u8], Malformed> {
    let end = at
        .checked_add(len)
        .filter(|&end| end < bytes.len())
        .ok_or(Malformed("a key or value runs past the end"))?;
    if bytes[end] != 0 {
        return Err(Malformed("a key or value is not NUL-terminated"));
    }
    let slice = &bytes[*at..end];
    *at = end + 1;
    Ok(slice)
}

/// Splits a property path (`request\0headers\0host`) into its segments.
pub fn property_path(bytes: &[u8]) -> Vec<&[u8]> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    bytes.split(|&b| b == 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let pairs: Pairs = vec![
            (b":method".to_vec(), b"GET".to_vec()),
            (b"x-empty".to_vec(), b"".to_vec()),
            (b"x-bin".to_vec(), vec![0xff, 0x00, 0x7f]),
        ];
        let bytes = encode(&pairs);
        assert_eq!(&bytes[..4], &3u32.to_le_bytes());
        assert_eq!(decode(&bytes).unwrap(), pairs);
        assert_eq!(decode(&encode::<&[u8], &[u8]>(&[])).unwrap(), Pairs::new());
        assert_eq!(decode(&[]).unwrap(), Pairs::new());
    }

    #[test]
    fn the_exact_layout_of_the_spec() {
        let bytes = encode(&[("a", "bc")]);
        assert_eq!(
            bytes,
            [1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'a', 0, b'b', b'c', 0]
        );
    }

    #[test]
    fn hostile_maps_are_errors() {
        assert!(decode(&[1, 0]).is_err());
        assert!(decode(&u32::MAX.to_le_bytes()).is_err());
        let mut bytes = encode(&[("key", "value")]);
        bytes[4] = 200; // key length past the end
        assert!(decode(&bytes).is_err());
        let mut bytes = encode(&[("key", "value")]);
        let last = bytes.len() - 1;
        bytes[last] = b'!'; // missing NUL
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn property_paths() {
        assert_eq!(
            property_path(b"request\0headers\0x-id"),
            vec![&b"request"[..], b"headers", b"x-id"]
        );
        assert_eq!(property_path(b"plugin_name\0"), vec![&b"plugin_name"[..]]);
    }
}
