//! PostgreSQL through the host's pools (imports `pg_query` and `pg_execute`).
//!
//! Statements are always parameterised: `$1`, `$2`, ... in the SQL, and the
//! values as `params`, each anything that implements [`ToParam`]:
//!
//! ```ignore
//! let rows = pg::query("orders", "select id, total from orders where customer = $1", &[&customer])?;
//! for row in &rows {
//!     let id: i64 = row.get("id")?;
//!     let total: String = row.get("total")?; // numeric: the exact decimal
//! }
//! let n = pg::execute("orders", "delete from orders where customer = $1", &[&customer])?;
//! ```
//!
//! The host converts each parameter to the type PostgreSQL inferred for it
//! and each column value from its type (the table is in docs/services.md):
//! integers and floats are JSON numbers, `numeric` an exact decimal string,
//! `bytea` `{"base64": ...}` ([`Bytes`]), `json`/`jsonb` the JSON itself,
//! time types strings, one-dimensional arrays JSON arrays, NULL `null`.
//! A parameter that does not fit its type is a `bad_request` error naming
//! it; a statement PostgreSQL refuses is a `query` error with the SQLSTATE
//! in `code`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::raw::Function;
use crate::{kind, Bytes, Error};

/// Runs a statement that returns rows (`select`, `... returning`) on the
/// PostgreSQL service named `service`.
pub fn query(service: &str, sql: &str, params: &[&dyn ToParam]) -> Result<Rows, Error> {
    let answer = crate::call(Function::PgQuery, &request(service, sql, params))?;
    Rows::from_answer(answer)
}

/// Runs a statement for its effect (`insert`, `update`, `delete`, DDL) and
/// returns the number of rows it affected (for a `select`: returned).
pub fn execute(service: &str, sql: &str, params: &[&dyn ToParam]) -> Result<u64, Error> {
    let answer = crate::call(Function::PgExecute, &request(service, sql, params))?;
    answer
        .get("rows_affected")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            Error::guest(
                kind::DECODE,
                format!("the host's pg_execute answer has no rows_affected: {answer}"),
            )
        })
}

/// The JSON request both imports take: `{"service", "sql", "params"}`.
pub(crate) fn request(service: &str, sql: &str, params: &[&dyn ToParam]) -> Value {
    let mut request = Map::new();
    request.insert("service".into(), Value::String(service.into()));
    request.insert("sql".into(), Value::String(sql.into()));
    request.insert(
        "params".into(),
        Value::Array(params.iter().map(|p| p.to_param()).collect()),
    );
    Value::Object(request)
}

/// A value that can be a statement parameter: its JSON form per the
/// contract.
///
/// Implemented for `i16`, `i32`, `i64`, `u32`, `f32`, `f64` (NaN and the
/// infinities as `"NaN"`, `"Infinity"`, `"-Infinity"`), `bool`, `str`,
/// `String`, [`serde_json::Value`] (sent as is: for `json`/`jsonb`, or any
/// type the contract accepts as a string), [`Bytes`] and `[u8]` (`bytea`, as
/// `{"base64": ...}`), `Option<T>` (`None` is NULL), `Vec<T>` (an array
/// parameter, `int4[]`, `text[]`, ...) and references to any of these. A
/// `numeric` parameter is best given as a string (`"12.50"`), which is
/// exact; time types as strings (`"2026-11-24T10:00:00Z"`).
pub trait ToParam {
    /// The parameter as JSON.
    fn to_param(&self) -> Value;
}

impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_param(&self) -> Value {
        (**self).to_param()
    }
}

macro_rules! integer_params {
    ($($t:ty),*) => {$(
        impl ToParam for $t {
            fn to_param(&self) -> Value {
                Value::from(*self)
            }
        }
    )*};
}
integer_params!(i16, i32, i64, u32);

/// A float as JSON: a number, or the strings PostgreSQL spells NaN and the
/// infinities with.
fn float(x: f64) -> Value {
    if x.is_nan() {
        Value::String("NaN".into())
    } else if x.is_infinite() {
        Value::String(if x > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

impl ToParam for f64 {
    fn to_param(&self) -> Value {
        float(*self)
    }
}

impl ToParam for f32 {
    fn to_param(&self) -> Value {
        float(f64::from(*self))
    }
}

impl ToParam for bool {
    fn to_param(&self) -> Value {
        Value::Bool(*self)
    }
}

impl ToParam for str {
    fn to_param(&self) -> Value {
        Value::String(self.to_string())
    }
}

impl ToParam for String {
    fn to_param(&self) -> Value {
        Value::String(self.clone())
    }
}

impl ToParam for Value {
    fn to_param(&self) -> Value {
        self.clone()
    }
}

impl ToParam for [u8] {
    fn to_param(&self) -> Value {
        crate::bytes::to_json(self)
    }
}

impl ToParam for Bytes {
    fn to_param(&self) -> Value {
        crate::bytes::to_json(&self.0)
    }
}

impl<T: ToParam> ToParam for Option<T> {
    fn to_param(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToParam::to_param)
    }
}

impl<T: ToParam> ToParam for Vec<T> {
    fn to_param(&self) -> Value {
        Value::Array(self.iter().map(ToParam::to_param).collect())
    }
}

/// A result column: its name and PostgreSQL type name (`int8`, `numeric`,
/// `text`, `timestamptz`, `_int4` for `int4[]`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

/// The rows a query returned, with their columns.
///
/// Serialises (serde) to the host's own shape,
/// `{"columns": [{"name", "type"}], "rows": [[...], ...]}`; [`Rows::to_json`]
/// gives the plainer array of objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rows {
    columns: Vec<Column>,
    rows: Vec<Vec<Value>>,
}

impl Rows {
    /// Reads a `pg_query` answer (one without `error`).
    pub(crate) fn from_answer(answer: Value) -> Result<Rows, Error> {
        serde_json::from_value(answer).map_err(|e| {
            Error::guest(
                kind::DECODE,
                format!("the host's pg_query answer is not {{columns, rows}}: {e}"),
            )
        })
    }

    /// The columns, in the statement's order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The position of the column named `name` (the first, if several are).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Row<'_>> {
        self.rows.get(i).map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// The first row, if there is one (for `returning` and aggregates).
    pub fn first(&self) -> Option<Row<'_>> {
        self.get(0)
    }

    /// The rows in order; `for row in &rows` does the same.
    pub fn iter(&self) -> RowIter<'_> {
        RowIter {
            columns: &self.columns,
            rows: self.rows.iter(),
        }
    }

    /// Every row as a JSON object keyed by column name, in an array: what a
    /// plugin that just returns the rows outputs. Values are as the host gave
    /// them (so `numeric` stays an exact string).
    pub fn to_json(&self) -> Value {
        Value::Array(self.iter().map(|row| row.to_json()).collect())
    }

    /// Every row deserialised into `T` from its JSON object (see
    /// [`Row::decode`]).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<Vec<T>, Error> {
        self.iter().map(|row| row.decode()).collect()
    }
}

impl<'a> IntoIterator for &'a Rows {
    type Item = Row<'a>;
    type IntoIter = RowIter<'a>;
    fn into_iter(self) -> RowIter<'a> {
        self.iter()
    }
}

/// The iterator of [`Rows::iter`].
pub struct RowIter<'a> {
    columns: &'a [Column],
    rows: std::slice::Iter<'a, Vec<Value>>,
}

impl<'a> Iterator for RowIter<'a> {
    type Item = Row<'a>;

    fn next(&mut self) -> Option<Row<'a>> {
        let values = self.rows.next()?;
        Some(Row {
            columns: self.columns,
            values,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}

impl ExactSizeIterator for RowIter<'_> {}

/// One row of [`Rows`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [Column],
    values: &'a [Value],
}

impl<'a> Row<'a> {
    /// The value of a column, by name (`"total"`) or position (`0`),
    /// deserialised into `T`: `i64`, `f64`, `bool`, `String`,
    /// `Option<T>` (for columns that may be NULL), [`Bytes`] (`bytea`),
    /// `Vec<T>` (arrays), `serde_json::Value` or any `Deserialize` type
    /// (`json`/`jsonb`).
    ///
    /// A `numeric` value arrives as an exact decimal string: read it as
    /// `String`, or as a number type (`f64`, `i64`), which parses it.
    pub fn get<T: DeserializeOwned>(&self, column: impl ColumnIndex) -> Result<T, Error> {
        let i = column.position(self.columns).ok_or_else(|| {
            let names: Vec<&str> = self.columns.iter().map(|c| c.name.as_str()).collect();
            Error::guest(
                kind::NO_SUCH_COLUMN,
                format!(
                    "no column {} (columns: {})",
                    column.describe(),
                    names.join(", ")
                ),
            )
        })?;
        let (col, value) = (&self.columns[i], self.values.get(i).unwrap_or(&Value::Null));
        match T::deserialize(value) {
            Ok(v) => Ok(v),
            Err(e) => {
                if let (Some(n), "numeric") = (value.as_str(), col.ty.as_str()) {
                    if let Ok(n) = n.parse::<serde_json::Number>() {
                        if let Ok(v) = T::deserialize(&Value::Number(n)) {
                            return Ok(v);
                        }
                    }
                }
                Err(Error::guest(
                    kind::DECODE,
                    format!(
                        "column `{}` ({}): cannot read {value} as {}: {e}",
                        col.name,
                        col.ty,
                        std::any::type_name::<T>()
                    ),
                ))
            }
        }
    }

    /// The JSON value of the column named `name`, as the host gave it
    /// (`Some(&Value::Null)` for NULL, `None` when there is no such column).
    pub fn value(&self, name: &str) -> Option<&'a Value> {
        let i = self.columns.iter().position(|c| c.name == name)?;
        self.values.get(i)
    }

    /// The values in column order.
    pub fn values(&self) -> &'a [Value] {
        self.values
    }

    /// The columns of the row (those of its [`Rows`]).
    pub fn columns(&self) -> &'a [Column] {
        self.columns
    }

    /// The row as a JSON object keyed by column name.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        for (column, value) in self.columns.iter().zip(self.values) {
            object.insert(column.name.clone(), value.clone());
        }
        Value::Object(object)
    }

    /// The row deserialised into `T` (a struct with a field per column)
    /// from [`Row::to_json`]. `numeric` columns are strings here: give their
    /// fields type `String`, or cast in SQL (`total::float8`).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_value(self.to_json()).map_err(|e| {
            Error::guest(
                kind::DECODE,
                format!("cannot read a row as {}: {e}", std::any::type_name::<T>()),
            )
        })
    }
}

/// How [`Row::get`] names a column: a name (`&str`, `String`) or a position
/// (`usize`).
pub trait ColumnIndex {
    /// The column's position among `columns`, if it is there.
    fn position(&self, columns: &[Column]) -> Option<usize>;
    /// How errors name it.
    fn describe(&self) -> String;
}

impl ColumnIndex for usize {
    fn position(&self, columns: &[Column]) -> Option<usize> {
        (*self < columns.len()).then_some(*self)
    }
    fn describe(&self) -> String {
        format!("#{self}")
    }
}

impl ColumnIndex for &str {
    fn position(&self, columns: &[Column]) -> Option<usize> {
        columns.iter().position(|c| c.name == *self)
    }
    fn describe(&self) -> String {
        format!("`{self}`")
    }
}

impl ColumnIndex for String {
    fn position(&self, columns: &[Column]) -> Option<usize> {
        self.as_str().position(columns)
    }
    fn describe(&self) -> String {
        self.as_str().describe()
    }
}

impl ColumnIndex for &String {
    fn position(&self, columns: &[Column]) -> Option<usize> {
        self.as_str().position(columns)
    }
    fn describe(&self) -> String {
        self.as_str().describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer() -> Value {
        json!({
            "columns": [
                {"name": "id", "type": "int8"},
                {"name": "total", "type": "numeric"},
                {"name": "items", "type": "jsonb"},
                {"name": "note", "type": "text"},
                {"name": "data", "type": "bytea"},
                {"name": "tags", "type": "_text"}
            ],
            "rows": [
                [1, "12.50", [{"sku": "a"}], null, {"base64": "AAH/"}, ["x", null]],
                [9007199254740993i64, "NaN", [], "gift", null, []]
            ]
        })
    }

    #[test]
    fn params_map_as_the_contract_says() {
        let customer = String::from("c-42");
        let name = "bob";
        let none: Option<i32> = None;
        let params: [&dyn ToParam; 16] = [
            &customer,
            &name,
            &"lit",
            &7i16,
            &-8i32,
            &9_007_199_254_740_993i64,
            &4_000_000_000u32,
            &1.5f64,
            &2.5f32,
            &f64::NAN,
            &f64::NEG_INFINITY,
            &true,
            &none,
            &Some("x"),
            &json!({"a": [1, 2]}),
            &vec![Some(1i32), None],
        ];
        let request = request("orders", "select $1", &params);
        assert_eq!(
            request,
            json!({
                "service": "orders",
                "sql": "select $1",
                "params": ["c-42", "bob", "lit", 7, -8, 9007199254740993i64, 4000000000u32,
                           1.5, 2.5, "NaN", "-Infinity", true, null, "x", {"a": [1, 2]}, [1, null]]
            })
        );
        let data: &[u8] = &[0, 1, 255];
        let bytes = Bytes(vec![0, 1, 255]);
        assert_eq!(
            request_params(&[&data, &bytes, &f32::INFINITY]),
            json!([{"base64": "AAH/"}, {"base64": "AAH/"}, "Infinity"])
        );
        // No parameters is an empty array, never absent or null.
        assert_eq!(request_params(&[]), json!([]));
    }

    fn request_params(params: &[&dyn ToParam]) -> Value {
        request("s", "q", params)["params"].clone()
    }

    #[test]
    fn rows_read_by_name_and_position() {
        let rows = Rows::from_answer(answer()).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(!rows.is_empty());
        assert_eq!(
            rows.columns()[1],
            Column {
                name: "total".into(),
                ty: "numeric".into()
            }
        );
        assert_eq!(rows.column_index("note"), Some(3));
        let row = rows.first().unwrap();
        assert_eq!(row.get::<i64>("id").unwrap(), 1);
        assert_eq!(row.get::<i64>(0).unwrap(), 1);
        assert_eq!(row.get::<String>("total").unwrap(), "12.50");
        assert_eq!(row.get::<f64>("total").unwrap(), 12.5);
        assert_eq!(row.get::<Option<String>>("note").unwrap(), None);
        assert_eq!(row.get::<Bytes>("data").unwrap(), Bytes(vec![0, 1, 255]));
        assert_eq!(
            row.get::<Vec<Option<String>>>("tags").unwrap(),
            vec![Some("x".into()), None]
        );
        assert_eq!(row.get::<Value>("items").unwrap(), json!([{"sku": "a"}]));
        assert_eq!(row.value("note"), Some(&Value::Null));
        assert_eq!(row.value("nope"), None);
        assert_eq!(row.values().len(), 6);
        let second = rows.get(1).unwrap();
        assert_eq!(second.get::<i64>("id").unwrap(), 9_007_199_254_740_993);
        assert_eq!(second.get::<String>(String::from("note")).unwrap(), "gift");
        assert!(rows.get(2).is_none());
        assert_eq!(rows.iter().len(), 2);
        let ids: Vec<i64> = (&rows).into_iter().map(|r| r.get("id").unwrap()).collect();
        assert_eq!(ids, [1, 9_007_199_254_740_993]);
    }

    #[test]
    fn get_errors_name_the_column() {
        let rows = Rows::from_answer(answer()).unwrap();
        let row = rows.first().unwrap();
        let e = row.get::<i64>("missing").unwrap_err();
        assert_eq!(e.kind, kind::NO_SUCH_COLUMN);
        assert!(
            e.message
                .contains("no column `missing` (columns: id, total, items"),
            "{e}"
        );
        assert_eq!(row.get::<i64>(6).unwrap_err().kind, kind::NO_SUCH_COLUMN);
        let e = row.get::<i64>("note").unwrap_err();
        assert_eq!(e.kind, kind::DECODE);
        assert!(
            e.message
                .starts_with("column `note` (text): cannot read null as i64"),
            "{e}"
        );
        // A numeric string that is not a number stays an error.
        let e = rows.get(1).unwrap().get::<f64>("total").unwrap_err();
        assert_eq!(e.kind, kind::DECODE);
        // Text is not parsed as a number: only numeric is.
        let e = rows.get(1).unwrap().get::<i64>("note").unwrap_err();
        assert_eq!(e.kind, kind::DECODE);
    }

    #[test]
    fn to_json_is_an_array_of_objects() {
        let rows = Rows::from_answer(answer()).unwrap();
        assert_eq!(
            rows.to_json(),
            json!([
                {"id": 1, "total": "12.50", "items": [{"sku": "a"}], "note": null,
                 "data": {"base64": "AAH/"}, "tags": ["x", null]},
                {"id": 9007199254740993i64, "total": "NaN", "items": [], "note": "gift",
                 "data": null, "tags": []}
            ])
        );
        // serde gives the host's own shape back.
        assert_eq!(serde_json::to_value(&rows).unwrap(), answer());
        let empty =
            Rows::from_answer(json!({"columns": [{"name": "id", "type": "int8"}], "rows": []}))
                .unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.to_json(), json!([]));
        assert!(empty.first().is_none());
    }

    #[test]
    fn decode_into_structs() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Order {
            id: i64,
            total: String,
            note: Option<String>,
        }
        let rows = Rows::from_answer(answer()).unwrap();
        let orders: Vec<Order> = rows.decode().unwrap();
        assert_eq!(
            orders[0],
            Order {
                id: 1,
                total: "12.50".into(),
                note: None
            }
        );
        assert_eq!(orders[1].note.as_deref(), Some("gift"));
        assert_eq!(rows.decode::<Vec<i64>>().unwrap_err().kind, kind::DECODE);
    }

    #[test]
    fn a_malformed_answer_is_a_decode_error() {
        let e = Rows::from_answer(json!({"rows_affected": 1})).unwrap_err();
        assert_eq!(e.kind, kind::DECODE);
    }

    #[test]
    fn query_and_execute_through_a_stand_in_host() {
        crate::testing::set_host(|function, request| {
            let request: Value = serde_json::from_slice(request).unwrap();
            assert_eq!(request["service"], "orders");
            match function {
                Function::PgQuery => serde_json::to_vec(&answer()).unwrap(),
                Function::PgExecute if request["params"] == json!(["c-1"]) => {
                    br#"{"rows_affected": 3}"#.to_vec()
                }
                Function::PgExecute => {
                    br#"{"error": {"kind": "query", "message": "duplicate key", "code": "23505"}}"#
                        .to_vec()
                }
                Function::Redis => unreachable!(),
            }
        });
        let rows = query("orders", "select ...", &[&"c-1"]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(execute("orders", "delete ...", &[&"c-1"]).unwrap(), 3);
        let e = execute("orders", "insert ...", &[&"c-2"]).unwrap_err();
        assert_eq!(
            (e.kind.as_str(), e.code.as_deref()),
            ("query", Some("23505"))
        );
        crate::testing::clear_host();
    }
}
