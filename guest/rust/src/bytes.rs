//! Binary data, which the contract carries as `{"base64": "..."}` (standard
//! alphabet, padded): `bytea` columns and parameters, binary Redis arguments
//! and replies.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Bytes that travel as `{"base64": "..."}`.
///
/// As a [`crate::pg::ToParam`] or [`crate::redis::ToArg`] it sends that
/// object; `Row::get::<Bytes>("col")` reads a `bytea` column back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(v)
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Bytes {
        Bytes(v.to_vec())
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// `{"base64": "<data>"}`.
pub(crate) fn to_json(data: &[u8]) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("base64".to_string(), Value::String(STANDARD.encode(data)));
    Value::Object(object)
}

/// The bytes of a `{"base64": "..."}` object (and nothing else in it);
/// `None` when `value` is not one, `Some(Err)` when its text is not base64.
pub(crate) fn from_json(value: &Value) -> Option<Result<Vec<u8>, String>> {
    let object = value.as_object()?;
    if object.len() != 1 {
        return None;
    }
    let text = object.get("base64")?.as_str()?;
    Some(
        STANDARD
            .decode(text)
            .map_err(|e| format!("invalid base64: {e}")),
    )
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        to_json(&self.0).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match from_json(&value) {
            Some(Ok(data)) => Ok(Bytes(data)),
            Some(Err(e)) => Err(D::Error::custom(e)),
            None => Err(D::Error::custom(format!(
                "expected {{\"base64\": \"...\"}}, found {value}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips() {
        let data = vec![0u8, 1, 2, 0xfe, 0xff];
        let json = serde_json::to_value(Bytes(data.clone())).unwrap();
        assert_eq!(json, json!({"base64": "AAEC/v8="}));
        assert_eq!(serde_json::from_value::<Bytes>(json).unwrap(), Bytes(data));
        assert_eq!(to_json(b""), json!({"base64": ""}));
    }

    #[test]
    fn refuses_other_shapes() {
        assert!(from_json(&json!("AAEC")).is_none());
        assert!(from_json(&json!({"base64": "AA==", "x": 1})).is_none());
        assert!(from_json(&json!({"base64": "!!"})).unwrap().is_err());
        assert!(serde_json::from_value::<Bytes>(json!([1, 2])).is_err());
    }
}
