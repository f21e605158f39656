//! A header map as filters see it, kept in the form the proxy sends it.
//!
//! The fields live in the `http::HeaderMap` hyper parsed and will write, so a
//! filter that reads one header and adds another costs a lookup and an
//! insert, not the whole map copied into byte pairs and rebuilt afterwards
//! (that round trip was about a sixth of a header filter's host cost, issue
//! 15). What a `HeaderMap` cannot hold sits beside it: the pseudo-headers
//! (`:method`, `:path`, `:authority`, `:scheme`, `:status`), and in
//! `unsendable` a field a guest adds that HTTP/1 could not carry (a name with
//! a space, a value with a newline). Filters see those like any other; they
//! are not sent.
//!
//! A map can be frozen when its fields have gone out (conceptually: the
//! embedder may still hold them, to send after the last callback). Filters
//! may go on editing it, as Envoy lets them, but the first edit after the
//! freeze keeps a copy of the fields as they were, and that copy is what
//! [`Headers::take_sent`] gives: so sending the fields costs no copy unless a
//! filter edits them too late to matter.
//!
//! Names compare case-insensitively and are kept lower-case, as HTTP/2
//! requires. A listing gives the pseudo-headers first, as the ABI's users
//! expect, then the fields, then the unsendable ones; the values of one name
//! keep their order.

use std::borrow::Cow;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::pairs::{self, Pairs};

type Bytes = Cow<'static, [u8]>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Headers {
    pseudo: Vec<(Bytes, Bytes)>,
    map: HeaderMap,
    unsendable: Vec<(Vec<u8>, Vec<u8>)>,
    freeze: Freeze,
}

#[derive(Clone, Debug, Default, PartialEq)]
enum Freeze {
    #[default]
    Open,
    Frozen,
    /// The fields (and pseudo-headers) as they were frozen, kept at the
    /// first edit after.
    Copied(Box<(HeaderMap, Vec<(Bytes, Bytes)>)>),
}

/// Where a key lives.
enum Key<'a> {
    Pseudo,
    Field(HeaderName),
    /// Not a name HTTP can carry, lower-cased.
    Unsendable(Cow<'a, [u8]>),
}

impl Headers {
    /// The fields of a message as received; add its pseudo-headers with
    /// [`Headers::push_pseudo`].
    pub fn from_map(map: HeaderMap) -> Headers {
        Headers {
            map,
            ..Headers::default()
        }
    }

    /// A map a guest serialized (or a test wrote), pair by pair.
    pub fn from_pairs(pairs: Pairs) -> Headers {
        let mut headers = Headers::default();
        for (key, value) in pairs {
            headers.add(&key, value);
        }
        headers
    }

    pub fn push_pseudo(&mut self, name: &'static str, value: impl Into<Bytes>) {
        debug_assert!(name.starts_with(':'));
        self.pseudo
            .push((Cow::Borrowed(name.as_bytes()), value.into()));
    }

    /// The first value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if key.first() == Some(&b':') {
            return find(&self.pseudo, key).map(|(_, v)| v.as_ref());
        }
        if let Some(value) = std::str::from_utf8(key)
            .ok()
            .and_then(|name| self.map.get(name))
        {
            return Some(value.as_bytes());
        }
        find(&self.unsendable, key).map(|(_, v)| v.as_slice())
    }

    /// Adds a value. The value is taken owned: the host reads it out of the
    /// guest's memory anyway, and its bytes become the `HeaderValue`'s
    /// without a copy; the key is parsed (and copied) where it lies.
    pub fn add(&mut self, key: &[u8], value: Vec<u8>) {
        self.before_edit();
        match classify(key, &value) {
            Key::Pseudo => self
                .pseudo
                .push((lower_case(key).into_owned().into(), value.into())),
            Key::Field(name) => {
                self.map.append(name, header_value(value));
            }
            Key::Unsendable(key) => self.unsendable.push((key.into_owned(), value)),
        }
    }

    /// Replaces every value of `key` with `value` (adds it if absent).
    pub fn replace(&mut self, key: &[u8], value: Vec<u8>) {
        self.before_edit();
        match classify(key, &value) {
            Key::Pseudo => match self.pseudo.iter().position(|(k, _)| same_name(k, key)) {
                Some(first) => {
                    self.pseudo[first].1 = value.into();
                    remove_after(&mut self.pseudo, first, key);
                }
                None => self
                    .pseudo
                    .push((lower_case(key).into_owned().into(), value.into())),
            },
            Key::Field(name) => {
                self.forget_unsendable(name.as_str().as_bytes());
                self.map.insert(name, header_value(value));
            }
            Key::Unsendable(key) => {
                if let Ok(name) = std::str::from_utf8(&key) {
                    self.map.remove(name);
                }
                match self.unsendable.iter().position(|(k, _)| same_name(k, &key)) {
                    Some(first) => {
                        self.unsendable[first].1 = value;
                        remove_after(&mut self.unsendable, first, &key);
                    }
                    None => self.unsendable.push((key.into_owned(), value)),
                }
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.before_edit();
        if key.first() == Some(&b':') {
            self.pseudo.retain(|(k, _)| !same_name(k, key));
            return;
        }
        if let Ok(name) = std::str::from_utf8(key) {
            self.map.remove(name);
        }
        self.forget_unsendable(key);
    }

    fn forget_unsendable(&mut self, key: &[u8]) {
        if !self.unsendable.is_empty() {
            self.unsendable.retain(|(k, _)| !same_name(k, key));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let pseudo = self.pseudo.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
        let fields = self
            .map
            .iter()
            .map(|(k, v)| (k.as_str().as_bytes(), v.as_bytes()));
        let unsendable = self
            .unsendable
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()));
        pseudo.chain(fields).chain(unsendable)
    }

    pub fn len(&self) -> usize {
        self.pseudo.len() + self.map.len() + self.unsendable.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ABI's serialized form (`pairs.rs`).
    pub fn encode(&self) -> Vec<u8> {
        pairs::encode_iter(self.len(), || self.iter())
    }

    /// The length of [`Headers::encode`]'s output, without building it.
    pub fn encoded_len(&self) -> usize {
        4 + self
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len() + 2)
            .sum::<usize>()
    }

    /// The fields that go on the wire (no pseudo-headers, nothing unsendable).
    pub fn map(&self) -> &HeaderMap {
        &self.map
    }

    /// Takes the fields out, leaving this map with its pseudo-headers only.
    pub fn take_map(&mut self) -> HeaderMap {
        std::mem::take(&mut self.map)
    }

    /// Marks the fields as sent: see the module's comment. Once: a second
    /// call keeps what the first froze.
    pub fn freeze(&mut self) {
        if self.freeze == Freeze::Open {
            self.freeze = Freeze::Frozen;
        }
    }

    /// The fields as they were frozen (as they are, if never frozen), taken
    /// out: call it after the last callback that may read them.
    pub fn take_sent(&mut self) -> HeaderMap {
        match std::mem::take(&mut self.freeze) {
            Freeze::Copied(sent) => sent.0,
            Freeze::Open | Freeze::Frozen => self.take_map(),
        }
    }

    /// A pseudo-header (`:status`) as it was frozen (as it is, if never
    /// frozen or not edited since).
    pub fn sent_pseudo(&self, key: &[u8]) -> Option<&[u8]> {
        let pseudo = match &self.freeze {
            Freeze::Copied(sent) => &sent.1,
            Freeze::Open | Freeze::Frozen => &self.pseudo,
        };
        find(pseudo, key).map(|(_, v)| v.as_ref())
    }

    fn before_edit(&mut self) {
        if self.freeze == Freeze::Frozen {
            let sent = (self.map.clone(), self.pseudo.clone());
            self.freeze = Freeze::Copied(Box::new(sent));
        }
    }

    pub fn to_pairs(&self) -> Pairs {
        self.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }
}

/// Where `key` (with `value`) goes: a field when HTTP can carry both.
fn classify<'a>(key: &'a [u8], value: &[u8]) -> Key<'a> {
    if key.first() == Some(&b':') {
        return Key::Pseudo;
    }
    // http's own rule for values (`is_valid` in http's value.rs), checked
    // here so that an invalid value is kept as the guest gave it
    // (`HeaderValue::from_bytes` would copy it to check it).
    if value.iter().all(|&b| b >= 32 && b != 127 || b == b'\t') {
        if let Ok(name) = crate::header_names::parse(key) {
            return Key::Field(name);
        }
    }
    Key::Unsendable(lower_case(key))
}

fn lower_case(key: &[u8]) -> Cow<'_, [u8]> {
    if key.iter().any(u8::is_ascii_uppercase) {
        Cow::Owned(key.to_ascii_lowercase())
    } else {
        Cow::Borrowed(key)
    }
}

/// A value `classify` accepted.
fn header_value(value: Vec<u8>) -> HeaderValue {
    // SAFETY: `classify` checked every byte with http's own rule, the one
    // `from_maybe_shared` would apply again (about a tenth of an edit's
    // cost); debug builds check again anyway.
    #[allow(unsafe_code)]
    let value = unsafe { HeaderValue::from_maybe_shared_unchecked(bytes::Bytes::from(value)) };
    value
}

fn find<'a, K: AsRef<[u8]>, V>(list: &'a [(K, V)], key: &[u8]) -> Option<&'a (K, V)> {
    list.iter().find(|(k, _)| same_name(k.as_ref(), key))
}

/// Removes the entries of `key` after the one at `first`.
fn remove_after<K: AsRef<[u8]>, V>(list: &mut Vec<(K, V)>, first: usize, key: &[u8]) {
    let mut i = first + 1;
    while i < list.len() {
        if same_name(list[i].0.as_ref(), key) {
            list.remove(i);
        } else {
            i += 1;
        }
    }
}

/// Names compare case-insensitively; guests almost always ask in lower
/// case, as the names are kept, so the byte comparison usually decides.
fn same_name(stored: &[u8], key: &[u8]) -> bool {
    stored == key || stored.eq_ignore_ascii_case(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(items: &[(&str, &str)]) -> Pairs {
        items
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn edits_ignore_case() {
        let mut m = Headers::from_pairs(owned(&[("x-a", "1")]));
        m.add(b"X-A", b"2".to_vec());
        assert_eq!(m.get(b"X-a"), Some(&b"1"[..]));
        m.replace(b"x-A", b"3".to_vec());
        assert_eq!(m.to_pairs(), owned(&[("x-a", "3")]));
        m.replace(b"NEW", b"v".to_vec());
        m.remove(b"X-A");
        assert_eq!(m.to_pairs(), owned(&[("new", "v")]));
    }

    #[test]
    fn pseudo_headers_come_first_and_are_not_fields() {
        let mut m = Headers::default();
        m.add(b"x-b", b"1".to_vec());
        m.push_pseudo(":method", &b"GET"[..]);
        m.add(b":path", b"/p".to_vec());
        assert_eq!(m.get(b":PATH"), Some(&b"/p"[..]));
        assert_eq!(
            m.to_pairs(),
            owned(&[(":method", "GET"), (":path", "/p"), ("x-b", "1")])
        );
        assert_eq!(m.map().len(), 1);
        assert_eq!(m.encoded_len(), m.encode().len());
        m.replace(b":path", b"/q".to_vec());
        assert_eq!(m.get(b":path"), Some(&b"/q"[..]));
        m.remove(b":method");
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn what_http_cannot_carry_is_seen_but_not_sent() {
        let mut m = Headers::default();
        m.add(b"Bad Name", b"v".to_vec());
        m.add(b"x-ok", b"line\nbreak".to_vec());
        m.add(b"x-ok", b"fine".to_vec());
        assert_eq!(m.get(b"bad name"), Some(&b"v"[..]));
        assert_eq!(m.get(b"x-ok"), Some(&b"fine"[..]));
        assert_eq!(m.map().len(), 1);
        // A valid replacement drops the invalid value too.
        m.replace(b"x-ok", b"one".to_vec());
        assert_eq!(m.to_pairs(), owned(&[("x-ok", "one"), ("bad name", "v")]));
        // An invalid replacement drops the valid values.
        m.replace(b"X-OK", b"a\rb".to_vec());
        assert_eq!(m.map().len(), 0);
        assert_eq!(m.get(b"x-ok"), Some(&b"a\rb"[..]));
        let bytes = vec![0xff, b'a'];
        m.add(&bytes, b"v".to_vec());
        assert_eq!(m.get(&bytes), Some(&b"v"[..]));
        m.remove(&bytes);
        assert_eq!(m.get(&bytes), None);
    }

    #[test]
    fn a_received_map_is_kept_as_it_is() {
        let mut map = HeaderMap::new();
        map.append("set-cookie", HeaderValue::from_static("a=1"));
        map.append("set-cookie", HeaderValue::from_static("b=2"));
        let mut m = Headers::from_map(map.clone());
        m.push_pseudo(":status", &b"200"[..]);
        assert_eq!(
            m.to_pairs(),
            owned(&[
                (":status", "200"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2")
            ])
        );
        assert_eq!(m.take_map(), map);
        assert_eq!(m.to_pairs(), owned(&[(":status", "200")]));
    }

    #[test]
    fn edits_after_a_freeze_are_seen_but_not_sent() {
        let mut map = HeaderMap::new();
        map.append("server", HeaderValue::from_static("up"));
        let mut m = Headers::from_map(map.clone());
        m.freeze();
        assert_eq!(m.take_sent(), map, "nothing edited: the fields themselves");

        let mut m = Headers::from_map(map.clone());
        m.add(b"x-before", b"1".to_vec());
        m.freeze();
        m.add(b"x-after", b"2".to_vec());
        m.remove(b"server");
        assert_eq!(m.get(b"x-after"), Some(&b"2"[..]));
        assert_eq!(m.get(b"server"), None);
        let sent = m.take_sent();
        assert_eq!(sent.get("x-before").unwrap(), "1");
        assert_eq!(sent.get("server").unwrap(), "up");
        assert!(sent.get("x-after").is_none());
    }

    #[test]
    fn a_status_edited_after_the_freeze_is_seen_but_not_sent_and_a_second_freeze_keeps_the_first() {
        let mut m = Headers::from_map(HeaderMap::new());
        m.push_pseudo(":status", b"200".to_vec());
        m.freeze();
        assert_eq!(m.sent_pseudo(b":status"), Some(&b"200"[..]));
        m.replace(b":status", b"503".to_vec());
        m.add(b"x-late", b"1".to_vec());
        // Frozen again (the whole-response path and the usual one both mark
        // the headers sent): what went out stays what went out.
        m.freeze();
        assert_eq!(m.get(b":status"), Some(&b"503"[..]));
        assert_eq!(m.sent_pseudo(b":status"), Some(&b"200"[..]));
        assert!(m.take_sent().get("x-late").is_none());
    }
}
