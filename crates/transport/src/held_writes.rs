//! An upstream HTTP/2 connection's writes, held back once per flush until
//! the worker's other ready tasks have run.
//!
//! Why: h2 opens a request's stream, and writes its HEADERS, when the
//! connection's task runs; only once the stream is open can the request's
//! body task (hyper's pipe) claim send capacity and queue its DATA, which
//! the connection then writes on its next turn. So every request with a
//! body, and every batch of requests that came in together, went out in
//! two writes: the node woke for HEADERS it could do nothing with, then for
//! the DATA. With the first write of a flush held for one turn of the
//! scheduler (the task wakes itself and goes to the back of the worker's
//! queue), the body tasks that the opening woke run first, and HEADERS and
//! DATA leave in one write. Nothing waits on a timer: when no other task
//! is ready the turn is immediate. A write of 16 KB or more (a full DATA
//! frame of a large body, which h2 flushes frame by frame) goes at once:
//! it has company enough, and holding each frame would cost a large body
//! a turn per frame. Measured in docs/benchmarks.md ("HEADERS and DATA in
//! one write": the node's reads and CPU per gRPC call).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Writes this large are not held (h2's default frame is 16 KB).
const HOLD_BELOW: usize = 16 * 1024;

/// `io` whose first write after each completed flush is held for a turn.
pub(crate) struct HeldWrites<I> {
    io: I,
    /// This flush's first write was held already: write at once until
    /// the flush completes.
    released: bool,
}

impl<I> HeldWrites<I> {
    pub(crate) fn new(io: I) -> Self {
        HeldWrites {
            io,
            released: false,
        }
    }

    /// Whether to write `len` bytes now; if not, the task is woken to come
    /// back after the other ready tasks.
    fn release(&mut self, cx: &Context<'_>, len: usize) -> bool {
        if self.released || len >= HOLD_BELOW {
            return true;
        }
        self.released = true;
        cx.waker().wake_by_ref();
        false
    }
}

impl<I: hyper::rt::Read + Unpin> hyper::rt::Read for HeldWrites<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: hyper::rt::Write + Unpin> hyper::rt::Write for HeldWrites<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.release(cx, buf.len()) {
            return Poll::Pending;
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().map(|b| b.len()).sum();
        if !this.release(cx, len) {
            return Poll::Pending;
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        if flushed.is_ready() {
            this.released = false;
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http2;
    use hyper::{Request, Response};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    use super::HeldWrites;

    const DATA: u8 = 0x0;
    const HEADERS: u8 = 0x1;

    /// The client's end of an in-memory connection, keeping each write.
    struct Recorded {
        io: TokioIo<tokio::io::DuplexStream>,
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl hyper::rt::Read for Recorded {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: hyper::rt::ReadBufCursor<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
        }
    }

    impl hyper::rt::Write for Recorded {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            let written = Pin::new(&mut this.io).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = written {
                this.writes.lock().unwrap().push(buf[..n].to_vec());
            }
            written
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    /// The (type, stream) of each HTTP/2 frame in one write.
    fn frames(mut write: &[u8]) -> Vec<(u8, u32)> {
        let mut found = Vec::new();
        while write.len() >= 9 {
            let length = u32::from_be_bytes([0, write[0], write[1], write[2]]) as usize;
            let stream = u32::from_be_bytes([write[5], write[6], write[7], write[8]]) & 0x7fff_ffff;
            found.push((write[3], stream));
            write = &write[(9 + length).min(write.len())..];
        }
        found
    }

    /// Two POSTs with a body over one HTTP/2 connection to a real hyper
    /// server (an echo); the frames of each write the client made for the
    /// second (stream 3), once the connection's settings were exchanged.
    async fn second_post_writes(held: bool) -> Vec<Vec<(u8, u32)>> {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(
            hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(
                TokioIo::new(server),
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async {
                    let body = request.into_body().collect().await?.to_bytes();
                    Ok::<_, hyper::Error>(Response::new(Full::new(body)))
                }),
            ),
        );
        let writes = Arc::new(Mutex::new(Vec::new()));
        let io = Recorded {
            io: TokioIo::new(client),
            writes: writes.clone(),
        };
        let mut sender = if held {
            handshake(HeldWrites::new(io)).await
        } else {
            handshake(io).await
        };
        for round in 0..2 {
            writes.lock().unwrap().clear();
            let request = Request::post("http://node.test/echo")
                .body(Full::new(Bytes::from_static(b"a message")))
                .unwrap();
            let answer = sender.send_request(request).await.unwrap();
            let body = answer.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"a message", "round {round}");
        }
        let writes = writes.lock().unwrap();
        writes.iter().map(|w| frames(w)).collect()
    }

    async fn handshake<I>(io: I) -> http2::SendRequest<Full<Bytes>>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (sender, connection) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
        tokio::spawn(connection);
        sender
    }

    fn write_with_headers(writes: &[Vec<(u8, u32)>]) -> &Vec<(u8, u32)> {
        writes
            .iter()
            .find(|w| w.contains(&(HEADERS, 3)))
            .unwrap_or_else(|| panic!("no HEADERS for stream 3 in {writes:?}"))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_body_leaves_in_the_write_of_its_headers() {
        let writes = second_post_writes(true).await;
        assert!(
            write_with_headers(&writes).contains(&(DATA, 3)),
            "HEADERS and DATA of stream 3 went apart: {writes:?}"
        );
    }

    /// What the wrapper is for: hyper's HTTP/2 client on its own sends a
    /// body's DATA in a write after its HEADERS (if a hyper or h2 upgrade
    /// changes that, this test says the wrapper may go).
    #[tokio::test(flavor = "current_thread")]
    async fn without_holding_a_body_leaves_after_its_headers() {
        let writes = second_post_writes(false).await;
        assert!(
            !write_with_headers(&writes).contains(&(DATA, 3)),
            "{writes:?}"
        );
        assert!(writes.iter().any(|w| w.contains(&(DATA, 3))), "{writes:?}");
    }
}
