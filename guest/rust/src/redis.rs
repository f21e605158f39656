//! Redis through the host's connections (import `redis`).
//!
//! [`command`] sends any command, its name and arguments each anything that
//! implements [`ToArg`]; the reply is a [`Value`]. [`get`], [`set`],
//! [`incr`] and [`expire`] are the common ones, typed:
//!
//! ```ignore
//! let visits = redis::incr("cache", "visits")?;
//! redis::expire("cache", "visits", 3600)?;
//! let reply = redis::command("cache", &[&"HSET", &"user:1", &"name", &name])?;
//! ```
//!
//! Arguments travel as JSON strings (text), numbers (sent in decimal) or
//! `{"base64": ...}` (binary). An error reply is an [`Error`] of kind `redis`
//! whose message is Redis's text (`WRONGTYPE ...`); an error nested in an
//! array (from `EXEC`) is a [`Value::Error`] element.

use serde_json::{Map, Value as Json};

use crate::raw::Function;
use crate::{kind, Bytes, Error};

/// Sends one command (`args[0]` is its name) to the Redis service named
/// `service` and returns the reply.
pub fn command(service: &str, args: &[&dyn ToArg]) -> Result<Value, Error> {
    let mut answer = crate::call(Function::Redis, &request(service, args))?;
    match answer.get_mut("reply") {
        Some(reply) => Value::from_json(&reply.take()),
        None => Err(Error::guest(
            kind::DECODE,
            format!("the host's redis answer has no reply: {answer}"),
        )),
    }
}

/// `GET key`: the value ([`Value::Text`], [`Value::Bytes`] when it is not
/// UTF-8) or [`Value::Nil`] when the key does not exist.
pub fn get(service: &str, key: &str) -> Result<Value, Error> {
    command(service, &[&"GET", &key])
}

/// `SET key value`.
pub fn set(service: &str, key: &str, value: impl ToArg) -> Result<(), Error> {
    command(service, &[&"SET", &key, &value]).map(drop)
}

/// `INCR key`: the value after the increment.
pub fn incr(service: &str, key: &str) -> Result<i64, Error> {
    let reply = command(service, &[&"INCR", &key])?;
    reply.as_i64().ok_or_else(|| {
        Error::guest(
            kind::DECODE,
            format!("INCR replied {reply:?}, not an integer"),
        )
    })
}

/// `EXPIRE key seconds`: whether the timeout was set (false when the key
/// does not exist).
pub fn expire(service: &str, key: &str, seconds: i64) -> Result<bool, Error> {
    let reply = command(service, &[&"EXPIRE", &key, &seconds])?;
    match reply.as_i64() {
        Some(n) => Ok(n == 1),
        None => Err(Error::guest(
            kind::DECODE,
            format!("EXPIRE replied {reply:?}, not an integer"),
        )),
    }
}

/// The JSON request: `{"service", "command": [...]}`.
pub(crate) fn request(service: &str, args: &[&dyn ToArg]) -> Json {
    let mut request = Map::new();
    request.insert("service".into(), Json::String(service.into()));
    request.insert(
        "command".into(),
        Json::Array(args.iter().map(|a| a.to_arg()).collect()),
    );
    Json::Object(request)
}

/// A command name or argument: its JSON form per the contract.
///
/// Implemented for `str` and `String` (sent as their UTF-8 bytes), integers
/// `i32`, `i64`, `u32`, `u64`, `usize` and `f64` (sent in decimal; the
/// infinities as `inf` and `-inf`), `[u8]` and [`Bytes`] (binary, as
/// `{"base64": ...}`), and references to any of these.
pub trait ToArg {
    /// The argument as JSON.
    fn to_arg(&self) -> Json;
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Json {
        (**self).to_arg()
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Json {
        Json::String(self.to_string())
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Json {
        Json::String(self.clone())
    }
}

macro_rules! integer_args {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Json {
                Json::from(*self)
            }
        }
    )*};
}
integer_args!(i32, i64, u32, u64, usize);

impl ToArg for f64 {
    fn to_arg(&self) -> Json {
        match serde_json::Number::from_f64(*self) {
            Some(n) => Json::Number(n),
            None if self.is_nan() => Json::String("nan".into()),
            None => Json::String(if *self > 0.0 { "inf" } else { "-inf" }.into()),
        }
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Json {
        crate::bytes::to_json(self)
    }
}

impl ToArg for Bytes {
    fn to_arg(&self) -> Json {
        crate::bytes::to_json(&self.0)
    }
}

/// A Redis reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// No value (`GET` of a missing key).
    Nil,
    /// An integer reply (and a RESP3 boolean, as 1 or 0).
    Int(i64),
    /// A simple or bulk string that is UTF-8 (and a RESP3 double, in
    /// decimal).
    Text(String),
    /// A bulk string that is not UTF-8.
    Bytes(Vec<u8>),
    /// An array reply.
    Array(Vec<Value>),
    /// An error inside an array reply (from `EXEC`). An error as the whole
    /// reply is an [`Error`] of kind `redis` instead.
    Error(String),
}

impl Value {
    /// Reads a reply in the contract's JSON form.
    pub fn from_json(reply: &Json) -> Result<Value, Error> {
        Ok(match reply {
            Json::Null => Value::Nil,
            Json::Bool(b) => Value::Int(i64::from(*b)),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Text(n.to_string()),
            },
            Json::String(s) => Value::Text(s.clone()),
            Json::Array(items) => Value::Array(
                items
                    .iter()
                    .map(Value::from_json)
                    .collect::<Result<_, _>>()?,
            ),
            Json::Object(object) => {
                if let Some(data) = crate::bytes::from_json(reply) {
                    Value::Bytes(data.map_err(|e| Error::guest(kind::DECODE, e))?)
                } else if let (1, Some(Json::String(e))) = (object.len(), object.get("error")) {
                    Value::Error(e.clone())
                } else {
                    return Err(Error::guest(
                        kind::DECODE,
                        format!("a Redis reply the contract does not define: {reply}"),
                    ));
                }
            }
        })
    }

    /// The reply in the contract's JSON form.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Nil => Json::Null,
            Value::Int(i) => Json::from(*i),
            Value::Text(s) => Json::String(s.clone()),
            Value::Bytes(b) => crate::bytes::to_json(b),
            Value::Array(items) => Json::Array(items.iter().map(Value::to_json).collect()),
            Value::Error(e) => {
                let mut object = Map::new();
                object.insert("error".into(), Json::String(e.clone()));
                Json::Object(object)
            }
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    /// An integer reply, or a string holding a decimal integer (what `GET`
    /// gives for a counter).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Text(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// A string reply's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A string reply's bytes, UTF-8 or not.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Text(s) => Some(s.as_bytes()),
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// An array reply's elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn args_map_as_the_contract_says() {
        let key = String::from("k");
        let data: &[u8] = &[0xff, 0];
        let request = request(
            "cache",
            &[
                &"SET",
                &key,
                &data,
                &42i64,
                &7usize,
                &1.5f64,
                &f64::INFINITY,
                &Bytes(b"hi".to_vec()),
            ],
        );
        assert_eq!(
            request,
            json!({"service": "cache", "command": [
                "SET", "k", {"base64": "/wA="}, 42, 7, 1.5, "inf", {"base64": "aGk="}
            ]})
        );
    }

    #[test]
    fn replies_map_as_the_contract_says() {
        let reply =
            json!([null, 3, "OK", {"base64": "/wA="}, [1, [2]], {"error": "ERR no"}, 1.5, true]);
        let value = Value::from_json(&reply).unwrap();
        assert_eq!(
            value,
            Value::Array(vec![
                Value::Nil,
                Value::Int(3),
                Value::Text("OK".into()),
                Value::Bytes(vec![0xff, 0]),
                Value::Array(vec![Value::Int(1), Value::Array(vec![Value::Int(2)])]),
                Value::Error("ERR no".into()),
                Value::Text("1.5".into()),
                Value::Int(1),
            ])
        );
        // Back to JSON (the double and the boolean as read).
        assert_eq!(
            value.to_json(),
            json!([null, 3, "OK", {"base64": "/wA="}, [1, [2]], {"error": "ERR no"}, "1.5", 1])
        );
        assert_eq!(
            Value::from_json(&json!({"x": 1})).unwrap_err().kind,
            kind::DECODE
        );
        assert_eq!(
            Value::from_json(&json!({"base64": "%%"})).unwrap_err().kind,
            kind::DECODE
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(Value::Int(5).as_i64(), Some(5));
        assert_eq!(Value::Text("17".into()).as_i64(), Some(17));
        assert_eq!(Value::Text("x".into()).as_i64(), None);
        assert_eq!(Value::Text("x".into()).as_str(), Some("x"));
        assert_eq!(Value::Bytes(vec![0xff]).as_str(), None);
        assert_eq!(Value::Bytes(vec![0xff]).as_bytes(), Some(&[0xff][..]));
        assert_eq!(Value::Text("x".into()).as_bytes(), Some(&b"x"[..]));
        assert!(Value::Nil.is_nil());
        assert_eq!(
            Value::Array(vec![Value::Nil])
                .as_array()
                .map(<[Value]>::len),
            Some(1)
        );
        assert_eq!(Value::Nil.as_array(), None);
    }

    #[test]
    fn conveniences_through_a_stand_in_host() {
        let store = std::rc::Rc::new(std::cell::RefCell::new(std::collections::HashMap::<
            String,
            Json,
        >::new()));
        let s = store.clone();
        crate::testing::set_host(move |function, request| {
            assert_eq!(function, Function::Redis);
            let request: Json = serde_json::from_slice(request).unwrap();
            assert_eq!(request["service"], "cache");
            let c = request["command"].as_array().unwrap();
            let key = c[1].as_str().unwrap().to_string();
            let reply = match c[0].as_str().unwrap() {
                "GET" => s.borrow().get(&key).cloned().unwrap_or(Json::Null),
                "SET" => {
                    s.borrow_mut().insert(key, c[2].clone());
                    json!("OK")
                }
                "INCR" => {
                    let n = s.borrow().get(&key).and_then(|v| v.as_str()?.parse::<i64>().ok()).unwrap_or(0) + 1;
                    s.borrow_mut().insert(key, json!(n.to_string()));
                    json!(n)
                }
                "EXPIRE" => json!(i64::from(s.borrow().contains_key(&key))),
                "LPUSH" => return br#"{"error": {"kind": "redis", "message": "WRONGTYPE Operation against a key holding the wrong kind of value"}}"#.to_vec(),
                _ => unreachable!(),
            };
            serde_json::to_vec(&json!({ "reply": reply })).unwrap()
        });
        assert_eq!(get("cache", "a").unwrap(), Value::Nil);
        set("cache", "a", "hello").unwrap();
        assert_eq!(get("cache", "a").unwrap().as_str(), Some("hello"));
        set("cache", "bin", &[0xffu8, 0][..]).unwrap();
        assert_eq!(store.borrow()["bin"], json!({"base64": "/wA="}));
        assert_eq!(get("cache", "bin").unwrap(), Value::Bytes(vec![0xff, 0]));
        assert_eq!(incr("cache", "n").unwrap(), 1);
        assert_eq!(incr("cache", "n").unwrap(), 2);
        assert!(expire("cache", "n", 60).unwrap());
        assert!(!expire("cache", "none", 60).unwrap());
        let e = command("cache", &[&"LPUSH", &"a", &"x"]).unwrap_err();
        assert_eq!(e.kind, kind::REDIS);
        assert!(e.message.starts_with("WRONGTYPE"));
        crate::testing::clear_host();
    }
}
