//! A `wasi:http` handler: answers every request with a greeting that names
//! the method and path, and the `GREETING` environment variable if the host
//! set one.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasip2::http::proxy::export!(Hello);

struct Hello;

impl Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let greeting = std::env::var("GREETING").unwrap_or_else(|_| "Hello".into());
        let path = request.path_with_query().unwrap_or_default();
        let text = format!("{greeting} from a component: {} {path}\n", name(request.method()));

        let headers = Fields::new();
        headers
            .append("content-type", b"text/plain")
            .expect("a valid header");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("the body, taken once");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("the body's stream, taken once");
        stream
            .blocking_write_and_flush(text.as_bytes())
            .expect("writing the body");
        drop(stream);
        OutgoingBody::finish(body, None).expect("ending the body");
    }
}

fn name(method: Method) -> String {
    match method {
        Method::Get => "GET".into(),
        Method::Head => "HEAD".into(),
        Method::Post => "POST".into(),
        Method::Put => "PUT".into(),
        Method::Delete => "DELETE".into(),
        Method::Connect => "CONNECT".into(),
        Method::Options => "OPTIONS".into(),
        Method::Trace => "TRACE".into(),
        Method::Patch => "PATCH".into(),
        Method::Other(other) => other,
    }
}
