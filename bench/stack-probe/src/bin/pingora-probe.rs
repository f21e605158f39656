//! Pingora 0.9: `pingora-probe hello PORT` answers locally in request_filter;
//! `pingora-probe proxy PORT UPSTREAM_PORT` proxies with ProxyHttp.
//! Threads and pool sizes come from the YAML given with `-c` (see run.sh).
use async_trait::async_trait;
use bytes::Bytes;
use pingora::prelude::*;
use pingora::http::ResponseHeader;

const BODY: &[u8] = br#"{"message":"Hello John Doe"}"#;

struct Probe {
    upstream: Option<u16>,
}

#[async_trait]
impl ProxyHttp for Probe {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        if self.upstream.is_some() {
            return Ok(false);
        }
        let mut header = ResponseHeader::build(200, Some(2))?;
        header.insert_header("content-type", "application/json")?;
        header.insert_header("content-length", BODY.len().to_string())?;
        session.write_response_header(Box::new(header), false).await?;
        session.write_response_body(Some(Bytes::from_static(BODY)), true).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let port = self.upstream.expect("proxy mode");
        Ok(Box::new(HttpPeer::new(("127.0.0.1", port), false, String::new())))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let port: u16 = args[2].parse().unwrap();
    let upstream = (mode == "proxy").then(|| args[3].parse().unwrap());
    let conf = args.iter().position(|a| a == "-c").map(|i| args[i + 1].clone());
    let opt = Opt { conf, ..Opt::default() };
    let mut server = Server::new(Some(opt)).unwrap();
    server.bootstrap();
    let mut service = http_proxy_service(&server.configuration, Probe { upstream });
    service.add_tcp(&format!("127.0.0.1:{port}"));
    server.add_service(service);
    server.run_forever();
}
