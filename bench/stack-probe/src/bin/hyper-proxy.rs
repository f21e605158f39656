//! hyper 1.x reverse proxy with a pooled keep-alive client, bodies streamed.
//! `hyper-proxy PORT UPSTREAM_PORT`
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u16>().unwrap());
    let (port, upstream) = (args.next().unwrap(), args.next().unwrap());
    let client: Client<_, Incoming> = Client::builder(TokioExecutor::new()).build_http();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let client = client.clone();
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                let client = client.clone();
                async move {
                    let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
                    *req.uri_mut() = Uri::try_from(format!("http://127.0.0.1:{upstream}{path}")).unwrap();
                    client.request(req).await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
