//! Lower-case hexadecimal, as W3C trace ids and certificate fingerprints
//! are written: by table, without the formatting machinery (a request's
//! trace ids are written on its path).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The hex of `bytes` into `out`, which is twice as long.
pub fn write(bytes: &[u8], out: &mut [u8]) {
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 15)];
    }
}

/// `bytes` as hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    write(bytes, &mut out);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// The byte two lower-case hex digits write (upper case is refused: W3C
/// Trace Context allows none).
pub fn byte(pair: [u8; 2]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// `digits` (lower-case hex) into `out`, half as long; `None` at a bad digit.
pub fn decode_into(digits: &[u8], out: &mut [u8]) -> Option<()> {
    for (pair, byte_out) in digits.chunks_exact(2).zip(out.iter_mut()) {
        *byte_out = byte([pair[0], pair[1]])?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let bytes = [0x00, 0x0f, 0xa5, 0xff];
        let text = super::encode(&bytes);
        assert_eq!(text, "000fa5ff");
        let mut back = [0u8; 4];
        super::decode_into(text.as_bytes(), &mut back).unwrap();
        assert_eq!(back, bytes);
        assert_eq!(super::byte(*b"AF"), None);
        assert_eq!(super::byte(*b"g0"), None);
    }
}
