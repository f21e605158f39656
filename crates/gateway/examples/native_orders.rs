//! The database benchmark's native contender (bench/db.sh, issue 14): the
//! `orders` plugin's `list_orders` written in Rust on wasmgate's listener,
//! querying PostgreSQL through the same host pool (`wasmgate-services`) the
//! plugin reaches through `wasmgate:host/services`. What is left between it
//! and `wasmgate serve orders.wasm list_orders` is the wasm.
//!
//! `native_orders PORT URL [CA_FILE]`: one worker thread, a pool of 16
//! connections. POST a customer id; the answer is that customer's orders as
//! a JSON array of objects, as the plugin answers.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};
use serde_json::{Map, Value};
use wasmgate_gateway::body::{self, Body};
use wasmgate_gateway::{Connection, Handler, ListenerConfig};
use wasmgate_services::postgres::PgService;
use wasmgate_services::{Service, ServiceConfig, Services};
use wasmgate_transport::body::RequestBody;

const LIST_ORDERS: &str =
    "select id, customer, total, created_at, items, note from orders where customer = $1 order by id";

struct NativeOrders {
    service: Arc<Service>,
}

impl NativeOrders {
    fn pg(&self) -> &PgService {
        match &*self.service {
            Service::Postgres(pg) => pg,
            Service::Redis(_) => unreachable!("built from a postgres:// URL"),
        }
    }
}

impl Handler for NativeOrders {
    async fn handle(
        &self,
        request: Request<RequestBody>,
        _connection: Connection,
    ) -> Response<Body> {
        let body = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let customer = String::from_utf8_lossy(&body).into_owned();
        let (status, json) = match self
            .pg()
            .query(LIST_ORDERS, &[Value::String(customer)], None)
            .await
        {
            // Rows as objects keyed by column name, as the plugin's
            // `Rows::to_json` (wasmgate-pdk) makes them.
            Ok(result) => {
                let rows = result
                    .rows
                    .into_iter()
                    .map(|row| {
                        let object: Map<String, Value> = result
                            .columns
                            .iter()
                            .map(|(name, _)| name.clone())
                            .zip(row)
                            .collect();
                        Value::Object(object)
                    })
                    .collect();
                (StatusCode::OK, Value::Array(rows))
            }
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                serde_json::json!({ "error": e.to_json() }),
            ),
        };
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(body::full(json.to_string()))
            .unwrap()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: native_orders PORT URL [CA_FILE]";
    let port: u16 = args.next().expect(usage).parse().expect(usage);
    let url = args.next().expect(usage);
    let mut config = ServiceConfig::from_flag(&format!("orders={url}")).expect("a postgres:// URL");
    config.pool_size = 16;
    config.tls_ca_file = args.next().map(Into::into);
    let service = Services::build(&[config], &Services::new())
        .unwrap_or_else(|(name, e)| panic!("service {name}: {e}"))
        .all()
        .remove(0);

    // One worker thread with a single-threaded runtime, as `wasmgate serve
    // --threads 1`; the pool's connections live on that worker's runtime.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (_keep_serving, shutdown) = tokio::sync::watch::channel(false);
    let workers = wasmgate_gateway::serve_workers(
        vec![wasmgate_gateway::Listening {
            socket: listener,
            tls: None,
            max_connections: 10_000,
        }],
        1,
        Arc::new(NativeOrders { service }),
        ListenerConfig::default(),
        shutdown,
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(workers.wait()).unwrap();
}
