//! PostgreSQL values to and from JSON, by the column's or parameter's type
//! (the mapping table in docs/services.md). tokio-postgres speaks the binary
//! format; this module decides what each type becomes. Types postgres-types
//! already decodes (integers, floats, text, json, timestamps through the
//! `time` crate, uuid, arrays) go through it; `numeric` has no exact Rust
//! counterpart there, so its binary form (base-10000 digits) is converted to
//! and from a decimal string here, without rounding.

use std::error::Error;

use base64::Engine;
use serde_json::{json, Value};
use tokio_postgres::types::{private::BytesMut, FromSql, IsNull, Kind, ToSql, Type};

type BoxError = Box<dyn Error + Sync + Send>;

/// One value: a column's, or parameter `$index`'s.
#[derive(Debug)]
pub(crate) struct PgValue {
    pub value: Value,
    /// 1-based parameter number, for messages (0 for column values).
    pub index: usize,
}

fn err(message: impl Into<String>) -> BoxError {
    message.into().into()
}

/// Whether values of `ty` can be converted (also what `accepts` says).
pub(crate) fn supported(ty: &Type) -> bool {
    match ty.kind() {
        Kind::Array(member) => supported(member),
        Kind::Domain(base) => supported(base),
        Kind::Enum(_) => true,
        _ => {
            matches!(
                *ty,
                Type::BOOL
                    | Type::INT2
                    | Type::INT4
                    | Type::INT8
                    | Type::OID
                    | Type::FLOAT4
                    | Type::FLOAT8
                    | Type::NUMERIC
                    | Type::TEXT
                    | Type::VARCHAR
                    | Type::BPCHAR
                    | Type::NAME
                    | Type::UNKNOWN
                    | Type::BYTEA
                    | Type::JSON
                    | Type::JSONB
                    | Type::TIMESTAMPTZ
                    | Type::TIMESTAMP
                    | Type::DATE
                    | Type::TIME
                    | Type::UUID
                    | Type::VOID
            ) || ty.name() == "citext"
        }
    }
}

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(PgValue {
            value: decode(ty, raw)?,
            index: 0,
        })
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(PgValue {
            value: Value::Null,
            index: 0,
        })
    }

    fn accepts(ty: &Type) -> bool {
        supported(ty)
    }
}

fn decode(ty: &Type, raw: &[u8]) -> Result<Value, BoxError> {
    match ty.kind() {
        Kind::Array(_) => {
            let items = Vec::<PgValue>::from_sql(ty, raw)?;
            return Ok(Value::Array(items.into_iter().map(|v| v.value).collect()));
        }
        Kind::Domain(base) => return decode(base, raw),
        Kind::Enum(_) => return Ok(json!(std::str::from_utf8(raw)?)),
        _ => {}
    }
    Ok(match *ty {
        Type::BOOL => json!(bool::from_sql(ty, raw)?),
        Type::INT2 => json!(i16::from_sql(ty, raw)?),
        Type::INT4 => json!(i32::from_sql(ty, raw)?),
        Type::INT8 => json!(i64::from_sql(ty, raw)?),
        Type::OID => json!(u32::from_sql(ty, raw)?),
        Type::FLOAT4 => float(f64::from(f32::from_sql(ty, raw)?)),
        Type::FLOAT8 => float(f64::from_sql(ty, raw)?),
        Type::NUMERIC => json!(numeric::decode(raw)?),
        Type::BYTEA => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(raw) }),
        Type::JSON | Type::JSONB => Value::from_sql(ty, raw)?,
        Type::TIMESTAMPTZ => {
            let at = time::OffsetDateTime::from_sql(ty, raw)?;
            json!(at.format(TIMESTAMPTZ_FORMAT)?)
        }
        Type::TIMESTAMP => {
            json!(time::PrimitiveDateTime::from_sql(ty, raw)?.format(TIMESTAMP_FORMAT)?)
        }
        Type::DATE => json!(time::Date::from_sql(ty, raw)?.format(DATE_FORMAT)?),
        Type::TIME => json!(time::Time::from_sql(ty, raw)?.format(TIME_FORMAT)?),
        Type::UUID => json!(uuid::Uuid::from_sql(ty, raw)?.to_string()),
        // What functions such as pg_sleep() return.
        Type::VOID => Value::Null,
        // text, varchar, bpchar, name, citext, unknown: UTF-8 text.
        _ => json!(std::str::from_utf8(raw)?),
    })
}

const TIMESTAMPTZ_FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
);
const TIMESTAMP_FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]"
);
const DATE_FORMAT: &[time::format_description::FormatItem<'static>] =
    time::macros::format_description!("[year]-[month]-[day]");
const TIME_FORMAT: &[time::format_description::FormatItem<'static>] =
    time::macros::format_description!("[hour]:[minute]:[second].[subsecond digits:6]");
const TIMESTAMP_INPUT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day][first [T][ ]][hour]:[minute]:[second][optional [.[subsecond]]]"
);
const TIME_INPUT: &[time::format_description::FormatItem<'static>] =
    time::macros::format_description!("[hour]:[minute]:[second][optional [.[subsecond]]]");

/// JSON has no NaN or infinities: those become strings.
fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => json!("NaN"),
        None if f > 0.0 => json!("Infinity"),
        None => json!("-Infinity"),
    }
}

impl ToSql for PgValue {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        if self.value.is_null() {
            return Ok(IsNull::Yes);
        }
        encode(ty, &self.value, self.index, out)
            .map_err(|e| err(format!("parameter ${} ({}): {e}", self.index, ty.name())))
    }

    fn accepts(ty: &Type) -> bool {
        supported(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

fn encode(ty: &Type, value: &Value, index: usize, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    match ty.kind() {
        Kind::Array(_) => {
            let Value::Array(items) = value else {
                return Err(err(format!("expected an array, got {value}")));
            };
            let items: Vec<PgValue> = items
                .iter()
                .map(|v| PgValue {
                    value: v.clone(),
                    index,
                })
                .collect();
            return items.to_sql(ty, out);
        }
        Kind::Domain(base) => return encode(base, value, index, out),
        Kind::Enum(_) => {
            out.extend_from_slice(text(value)?.as_bytes());
            return Ok(IsNull::No);
        }
        _ => {}
    }
    match *ty {
        Type::BOOL => value
            .as_bool()
            .ok_or_else(|| err(format!("expected true or false, got {value}")))?
            .to_sql(ty, out),
        Type::INT2 => i16::try_from(integer(value)?)
            .map_err(|_| err(format!("{value} is out of range for int2")))?
            .to_sql(ty, out),
        Type::INT4 => i32::try_from(integer(value)?)
            .map_err(|_| err(format!("{value} is out of range for int4")))?
            .to_sql(ty, out),
        Type::INT8 => integer(value)?.to_sql(ty, out),
        Type::OID => u32::try_from(integer(value)?)
            .map_err(|_| err(format!("{value} is out of range for oid")))?
            .to_sql(ty, out),
        Type::FLOAT4 => (real(value)? as f32).to_sql(ty, out),
        Type::FLOAT8 => real(value)?.to_sql(ty, out),
        Type::NUMERIC => {
            let text = match value {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                other => {
                    return Err(err(format!(
                        "expected a decimal string or a number, got {other}"
                    )))
                }
            };
            numeric::encode(&text, out)?;
            Ok(IsNull::No)
        }
        Type::BYTEA => {
            let encoded = value
                .get("base64")
                .and_then(Value::as_str)
                .ok_or_else(|| err(format!("expected {{\"base64\": \"...\"}}, got {value}")))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| err(format!("invalid base64: {e}")))?;
            out.extend_from_slice(&bytes);
            Ok(IsNull::No)
        }
        Type::JSON | Type::JSONB => value.to_sql(ty, out),
        Type::TIMESTAMPTZ => time::OffsetDateTime::parse(
            text(value)?,
            &time::format_description::well_known::Rfc3339,
        )
        .map_err(|e| {
            err(format!(
                "expected an RFC 3339 timestamp with an offset: {e}"
            ))
        })?
        .to_sql(ty, out),
        Type::TIMESTAMP => time::PrimitiveDateTime::parse(text(value)?, TIMESTAMP_INPUT)
            .map_err(|e| err(format!("expected YYYY-MM-DDTHH:MM:SS[.ffffff]: {e}")))?
            .to_sql(ty, out),
        Type::DATE => time::Date::parse(text(value)?, DATE_FORMAT)
            .map_err(|e| err(format!("expected YYYY-MM-DD: {e}")))?
            .to_sql(ty, out),
        Type::TIME => time::Time::parse(text(value)?, TIME_INPUT)
            .map_err(|e| err(format!("expected HH:MM:SS[.ffffff]: {e}")))?
            .to_sql(ty, out),
        Type::UUID => uuid::Uuid::parse_str(text(value)?)
            .map_err(|e| err(format!("expected a UUID: {e}")))?
            .to_sql(ty, out),
        _ => {
            out.extend_from_slice(text(value)?.as_bytes());
            Ok(IsNull::No)
        }
    }
}

fn text(value: &Value) -> Result<&str, BoxError> {
    value
        .as_str()
        .ok_or_else(|| err(format!("expected a string, got {value}")))
}

/// An integer from a JSON number without fraction, or a string of one.
fn integer(value: &Value) -> Result<i64, BoxError> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| err(format!("expected an integer, got {n}"))),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| err(format!("expected an integer, got {s:?}"))),
        other => Err(err(format!("expected an integer, got {other}"))),
    }
}

fn real(value: &Value) -> Result<f64, BoxError> {
    match value {
        Value::Number(n) => Ok(n.as_f64().expect("JSON numbers are finite")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other
                .parse()
                .map_err(|_| err(format!("expected a number, got {other:?}"))),
        },
        other => Err(err(format!("expected a number, got {other}"))),
    }
}

/// `numeric`'s binary form: a header of four 16-bit fields (number of
/// digits, weight of the first digit as a power of 10000, sign, display
/// scale) and the base-10000 digits, most significant first.
pub(crate) mod numeric {
    use super::{err, BoxError, BytesMut};

    const POSITIVE: u16 = 0x0000;
    const NEGATIVE: u16 = 0x4000;
    const NAN: u16 = 0xC000;
    const PLUS_INFINITY: u16 = 0xD000;
    const MINUS_INFINITY: u16 = 0xF000;

    pub(crate) fn decode(raw: &[u8]) -> Result<String, BoxError> {
        let field = |i: usize| -> Result<u16, BoxError> {
            raw.get(i * 2..i * 2 + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| err("truncated numeric"))
        };
        let ndigits = field(0)? as usize;
        let weight = field(1)? as i16 as i64;
        let sign = field(2)?;
        let dscale = field(3)? as usize;
        match sign {
            NAN => return Ok("NaN".into()),
            PLUS_INFINITY => return Ok("Infinity".into()),
            MINUS_INFINITY => return Ok("-Infinity".into()),
            POSITIVE | NEGATIVE => {}
            other => return Err(err(format!("unknown numeric sign {other:#x}"))),
        }
        let digits: Vec<u16> = (0..ndigits)
            .map(|i| field(4 + i))
            .collect::<Result<_, _>>()?;
        // Digit i stands for digits[i] * 10000^(weight - i).
        let group = |power: i64| -> u16 {
            let i = weight - power;
            if i >= 0 {
                digits.get(i as usize).copied().unwrap_or(0)
            } else {
                0
            }
        };
        let mut text = String::new();
        if sign == NEGATIVE {
            text.push('-');
        }
        if weight < 0 {
            text.push('0');
        } else {
            text.push_str(&group(weight).to_string());
            for power in (0..weight).rev() {
                text.push_str(&format!("{:04}", group(power)));
            }
        }
        if dscale > 0 {
            let mut fraction = String::new();
            let mut power = -1;
            while fraction.len() < dscale {
                fraction.push_str(&format!("{:04}", group(power)));
                power -= 1;
            }
            fraction.truncate(dscale);
            text.push('.');
            text.push_str(&fraction);
        }
        Ok(text)
    }

    /// Writes the decimal `text` (`-12.50`, `1e-7`, `NaN`, `Infinity`).
    pub(crate) fn encode(text: &str, out: &mut BytesMut) -> Result<(), BoxError> {
        let text = text.trim();
        let special = match text {
            "NaN" => Some(NAN),
            "Infinity" | "+Infinity" => Some(PLUS_INFINITY),
            "-Infinity" => Some(MINUS_INFINITY),
            _ => None,
        };
        if let Some(sign) = special {
            for field in [0u16, 0, sign, 0] {
                out.extend_from_slice(&field.to_be_bytes());
            }
            return Ok(());
        }
        let bad = || err(format!("{text:?} is not a decimal number"));
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i64>().map_err(|_| bad())?),
            None => (unsigned, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int_part.is_empty() && frac_part.is_empty()
            || !int_part
                .bytes()
                .chain(frac_part.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        // All digits, and how many of them are before the decimal point.
        let digits: Vec<u8> = int_part
            .bytes()
            .chain(frac_part.bytes())
            .map(|b| b - b'0')
            .collect();
        let point = int_part.len() as i64 + exponent;
        let dscale = (digits.len() as i64 - point).max(0);
        if dscale > 0x3FFF || point.abs() > 131_072 {
            return Err(err(format!("{text:?} is out of numeric's range")));
        }
        // Align on base-10000 groups around the decimal point: the first
        // group holds the digits of 10000^weight.
        let int_digits = point.max(0);
        let lead = (4 - int_digits % 4) % 4;
        let weight = (int_digits + lead) / 4 - 1;
        let start = point - int_digits - lead; // position of the first aligned digit
        let end = point + ((dscale + 3) / 4) * 4;
        let digit_at = |pos: i64| -> u16 {
            if pos < 0 || pos >= digits.len() as i64 {
                0
            } else {
                u16::from(digits[pos as usize])
            }
        };
        let mut groups = Vec::new();
        let mut pos = start;
        while pos < end {
            groups.push((0..4).fold(0u16, |acc, k| acc * 10 + digit_at(pos + k)));
            pos += 4;
        }
        // Drop leading zero groups (each lowers the weight) and trailing ones.
        let mut weight = weight;
        while groups.first() == Some(&0) {
            groups.remove(0);
            weight -= 1;
        }
        while groups.last() == Some(&0) {
            groups.pop();
        }
        let sign = if negative && !groups.is_empty() {
            NEGATIVE
        } else {
            POSITIVE
        };
        if groups.is_empty() {
            weight = 0;
        }
        for field in [
            groups.len() as u16,
            weight as i16 as u16,
            sign,
            dscale as u16,
        ] {
            out.extend_from_slice(&field.to_be_bytes());
        }
        for group in groups {
            out.extend_from_slice(&group.to_be_bytes());
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn roundtrip(text: &str) -> String {
            let mut out = BytesMut::new();
            encode(text, &mut out).unwrap();
            decode(&out).unwrap()
        }

        #[test]
        fn decimals_survive_exactly() {
            for (given, expected) in [
                ("0", "0"),
                ("12.50", "12.50"),
                ("-12.50", "-12.50"),
                ("10000", "10000"),
                ("123456789.000012345", "123456789.000012345"),
                ("0.0001", "0.0001"),
                ("0.00000123", "0.00000123"),
                ("1e-7", "0.0000001"),
                ("1.5e10", "15000000000"),
                (
                    "99999999999999999999999999999999.99",
                    "99999999999999999999999999999999.99",
                ),
                ("-0.000", "0.000"),
                ("NaN", "NaN"),
                ("Infinity", "Infinity"),
                ("-Infinity", "-Infinity"),
            ] {
                assert_eq!(roundtrip(given), expected, "{given}");
            }
            let mut out = BytesMut::new();
            assert!(encode("12.a", &mut out).is_err());
            assert!(encode("", &mut out).is_err());
        }

        #[test]
        fn postgres_binary_form() {
            // 12.50 as PostgreSQL sends it: 2 digits, weight 0, +, scale 2: [12, 5000].
            let raw = [0, 2, 0, 0, 0, 0, 0, 2, 0, 12, 0x13, 0x88];
            assert_eq!(decode(&raw).unwrap(), "12.50");
            let mut out = BytesMut::new();
            encode("12.50", &mut out).unwrap();
            assert_eq!(&out[..], &raw);
        }
    }
}
