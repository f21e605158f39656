//! The floor of wasmgate's present design (issue 57): hyper's HTTP/1.1
//! server and hyper's client connection API, one upstream connection per
//! downstream connection, no pool, routing, headers or limits of its own.
//! Everything wasmgate's proxy path spends beyond this is wasmgate's.
//! `hyper-conn-proxy PORT UPSTREAM_PORT`
use std::cell::RefCell;
use std::rc::Rc;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u16>().unwrap());
    let (port, upstream) = (args.next().unwrap(), args.next().unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::task::spawn_local(async move {
                let node = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                    .await
                    .unwrap();
                node.set_nodelay(true).unwrap();
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(node))
                        .await
                        .unwrap();
                tokio::task::spawn_local(connection);
                // HTTP/1.1 without pipelining: one request at a time uses the sender.
                let sender: Rc<RefCell<Option<SendRequest<Incoming>>>> =
                    Rc::new(RefCell::new(Some(sender)));
                let service = service_fn(move |request: Request<Incoming>| {
                    let sender = sender.clone();
                    async move {
                        let mut taken = sender.borrow_mut().take().expect("one request at a time");
                        let response = taken.send_request(request).await;
                        *sender.borrow_mut() = Some(taken);
                        response
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}
