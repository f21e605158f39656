//! The data the sequences' blocks are made of: keys (some not UTF-8),
//! log texts and HTTP request JSON (to the test's server, and broken).

use crate::common::script_guest::*;

pub(crate) struct Entries {
    pub(crate) data: Data,
    pub(crate) keys: Vec<(u32, u32)>,
    pub(crate) texts: Vec<(u32, u32)>,
    pub(crate) json: Vec<(u32, u32)>,
}

impl Entries {
    pub(crate) fn new(port: u16) -> Entries {
        let mut data = Data::new();
        let add = |data: &mut Data, kind: &'static str, bytes: &[u8]| data.add(kind, bytes);
        for key in [
            &b"greeting"[..],
            b"empty",
            b"missing",
            b"",
            b"\xff\xfe not utf-8",
            b"v1",
            b"v2",
        ] {
            add(&mut data, "key", key);
        }
        for text in [
            &b"a log line"[..],
            b"",
            b"another line, with \"quotes\"",
            &[b'm'; 2000],
        ] {
            add(&mut data, "text", text);
        }
        let ok = format!(r#"{{"url":"http://127.0.0.1:{port}/ok"}}"#);
        for json in [
            ok.clone(),
            ok.clone(),
            ok,
            format!(
                r#"{{"url":"http://127.0.0.1:{port}/ok","method":"POST","headers":{{"x-a":"b"}}}}"#
            ),
            format!(r#"{{"url":"http://127.0.0.1:{port}/status/404"}}"#),
            r#"{"url":"http://example.com/"}"#.to_string(),
            r#"{"url":"not a url"}"#.to_string(),
            "{".to_string(),
        ] {
            add(&mut data, "json", json.as_bytes());
        }
        let keys = data.entries["key"].clone();
        let texts = data.entries["text"].clone();
        let json = data.entries["json"].clone();
        Entries {
            data,
            keys,
            texts,
            json,
        }
    }

    pub(crate) fn bytes(&self, (offset, len): (u32, u32)) -> &[u8] {
        &self.data.bytes[offset as usize..(offset + len) as usize]
    }
}
