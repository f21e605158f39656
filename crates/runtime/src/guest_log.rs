//! A guest's WASI stdout and stderr as log events, naming the plugin (and,
//! for gateway filters, the route), shared by both ABIs.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// One log event per write.
#[derive(Clone)]
pub struct LogStream {
    plugin: Arc<str>,
    /// Empty outside the gateway.
    route: Arc<str>,
    stream: &'static str,
}

impl LogStream {
    pub fn new(plugin: &str, route: &str, stream: &'static str) -> LogStream {
        LogStream {
            plugin: plugin.into(),
            route: route.into(),
            stream,
        }
    }

    /// `(stdout, stderr)`.
    pub fn pair(plugin: &str, route: &str) -> (LogStream, LogStream) {
        (
            LogStream::new(plugin, route, "stdout"),
            LogStream::new(plugin, route, "stderr"),
        )
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let text = String::from_utf8_lossy(buf);
        let text = escape(text.trim_end_matches('\n'));
        let (plugin, stream) = (&self.plugin, self.stream);
        match (text.is_empty(), self.route.is_empty()) {
            (true, _) => {}
            (false, true) => tracing::info!(target: "wasmgate::plugin", %plugin, stream, "{text}"),
            (false, false) => {
                let route = &self.route;
                tracing::info!(target: "wasmgate::plugin", %plugin, %route, stream, "{text}")
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A guest's log text as one line: line breaks and other control
/// characters written as escapes (`\n`, `\r`, `\u{1b}`), so a plugin cannot
/// forge log lines of its own (a newline followed by a made-up entry) nor
/// move an operator's terminal with escape sequences. Text without them is
/// returned as it is.
pub fn escape(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}');
    if !text.contains(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if unsafe_char(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn a_guest_cannot_write_a_second_line() {
        assert_eq!(escape("plain text, tabs\tkept"), "plain text, tabs\tkept");
        assert_eq!(
            escape("ok\n2026-01-01T00:00:00Z  INFO wasmgate: forged"),
            "ok\\n2026-01-01T00:00:00Z  INFO wasmgate: forged"
        );
        assert_eq!(
            escape("a\r\nb\u{1b}[2Jc\u{2028}"),
            "a\\r\\nb\\u{1b}[2Jc\\u{2028}"
        );
    }
}
