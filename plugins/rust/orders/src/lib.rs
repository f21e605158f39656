//! `orders`: the example of `wasmgate-pdk` (guest/rust), PostgreSQL service
//! `orders` (table in schema.sql) and Redis service `cache`. Inputs and
//! outputs are documented in plugins/README.md.

use extism_pdk::*;
use serde::Deserialize;
use serde_json::{json, Value};
use wasmgate_pdk::raw::{self, Function};
use wasmgate_pdk::{pg, redis, Bytes};

const PG: &str = "orders";
const CACHE: &str = "cache";

/// Input: a customer id. Output: that customer's orders, a JSON array of
/// objects (`total` an exact decimal string, `items` the JSON stored).
#[plugin_fn]
pub fn list_orders(customer: String) -> FnResult<String> {
    let rows = pg::query(
        PG,
        "select id, customer, total, created_at, items, note from orders where customer = $1 order by id",
        &[&customer],
    )?;
    Ok(rows.to_json().to_string())
}

#[derive(Deserialize)]
struct NewOrder {
    customer: String,
    /// A string (`"12.50"`, exact) or a number.
    total: Value,
    #[serde(default = "no_items")]
    items: Value,
    #[serde(default)]
    note: Option<String>,
}

fn no_items() -> Value {
    json!([])
}

/// Input: `{"customer", "total", "items"?, "note"?}`. Output: `{"id": N}`.
#[plugin_fn]
pub fn add_order(Json(order): Json<NewOrder>) -> FnResult<String> {
    let rows = pg::query(
        PG,
        "insert into orders (customer, total, items, note) values ($1, $2, $3, $4) returning id",
        &[&order.customer, &order.total, &order.items, &order.note],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| Error::msg("insert returned no row"))?;
    let id: i64 = row.get("id")?;
    Ok(json!({ "id": id }).to_string())
}

/// Input: a customer id, or nothing for every customer. Output: `{"count": N}`.
#[plugin_fn]
pub fn order_count(customer: String) -> FnResult<String> {
    let rows = if customer.is_empty() {
        pg::query(PG, "select count(*) as count from orders", &[])?
    } else {
        pg::query(
            PG,
            "select count(*) as count from orders where customer = $1",
            &[&customer],
        )?
    };
    let count: i64 = rows
        .first()
        .ok_or_else(|| Error::msg("no row"))?
        .get("count")?;
    Ok(json!({ "count": count }).to_string())
}

/// Input: a customer id. Deletes that customer's orders with `pg_execute`.
/// Output: `{"rows_affected": N}`.
#[plugin_fn]
pub fn delete_orders(customer: String) -> FnResult<String> {
    let n = pg::execute(PG, "delete from orders where customer = $1", &[&customer])?;
    Ok(json!({ "rows_affected": n }).to_string())
}

/// No input. Sends one parameter of each mapped type, selects each back
/// cast to its type, and outputs the host's answer as it came:
/// `{"columns": [{"name", "type"}], "rows": [[...]]}`.
#[plugin_fn]
pub fn types() -> FnResult<String> {
    let none: Option<i32> = None;
    let rows = pg::query(
        PG,
        "select $1::int8 as i8, $2::int4 as i4, $3::int2 as i2, $4::numeric as n, \
         $5::float8 as f8, $6::float4 as f4, $7::float8 as nan, $8::float8 as neg_inf, \
         $9::bool as b, $10::text as t, $11::bytea as bytes, $12::jsonb as j, \
         $13::timestamptz as tz, $14::timestamp as ts, $15::date as d, $16::time as tm, \
         $17::uuid as u, $18::int4[] as ints, $19::text[] as texts, $20::int4 as null_int, \
         $21::oid as o",
        &[
            &9_007_199_254_740_993i64,
            &-2_147_483_648i32,
            &7i16,
            &"12345678901234567890.123456789",
            &1.5f64,
            &2.5f32,
            &f64::NAN,
            &f64::NEG_INFINITY,
            &true,
            &"héllo, wörld",
            &Bytes(vec![0, 1, 2, 0xfe, 0xff]),
            &json!({"a": [1, 2.5, null], "b": {"c": "d"}}),
            &"2026-11-24T10:00:00.123456+02:00",
            &"2026-11-24T10:00:00.123456",
            &"2026-11-24",
            &"10:00:00.123456",
            &"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            &vec![Some(1i32), None, Some(3)],
            &vec!["x", "y"],
            &none,
            &4_000_000_000u32,
        ],
    )?;
    Ok(serde_json::to_string(&rows)?)
}

/// Input: a key. `INCR`s it on `cache`; output: the new count, in decimal.
#[plugin_fn]
pub fn visits(key: String) -> FnResult<String> {
    Ok(redis::incr(CACHE, &key)?.to_string())
}

/// Input: any bytes. `SET redis_roundtrip <input>` (sent as binary), then
/// `GET redis_roundtrip`; output: the reply as JSON (a string when the bytes
/// are UTF-8, else `{"base64": ...}`).
#[plugin_fn]
pub fn redis_roundtrip(value: Vec<u8>) -> FnResult<String> {
    redis::set(CACHE, "redis_roundtrip", value.as_slice())?;
    Ok(redis::get(CACHE, "redis_roundtrip")?.to_json().to_string())
}

/// Input: `{"op": "redis"|"pg_query"|"pg_execute", ...the request}`, or
/// `{"op": ..., "raw": "<request text>"}` to send text that need not be
/// JSON. Sends the request (without `op`) as is; output: the host's answer
/// as is, `{"error": ...}` included.
#[plugin_fn]
pub fn probe(Json(mut input): Json<Value>) -> FnResult<Vec<u8>> {
    let object = input
        .as_object_mut()
        .ok_or_else(|| Error::msg("expected a JSON object"))?;
    let op = object
        .remove("op")
        .and_then(|op| op.as_str().and_then(Function::from_name))
        .ok_or_else(|| Error::msg("expected \"op\": \"redis\", \"pg_query\" or \"pg_execute\""))?;
    let request = match object.get("raw") {
        Some(Value::String(raw)) => raw.clone().into_bytes(),
        _ => serde_json::to_vec(&input)?,
    };
    Ok(raw::call(op, &request)?)
}
