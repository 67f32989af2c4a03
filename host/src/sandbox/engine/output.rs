//! The attempt's log: the guest's `log` lines and its stdout/stderr, kept in one bounded
//! buffer. Output past the bound is dropped (and the log marked truncated), never an
//! error: a chatty guest must not fail because of its logging.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

#[derive(Default)]
struct Buffer {
    bytes: Vec<u8>,
    truncated: bool,
    /// The last panic the guest reported (`engine::trap`), kept apart from the bytes so a
    /// full log cannot lose it; bounded where it is noted.
    panic: Option<String>,
    /// Nothing more is kept: a replay that stopped answered the guest a placeholder, and
    /// what the guest makes of it (a traceback of `host unavailable`) is not its log.
    closed: bool,
}

#[derive(Clone)]
pub struct AttemptLog {
    inner: Arc<Mutex<Buffer>>,
    cap: usize,
}

impl AttemptLog {
    pub fn new(cap: usize) -> Self {
        AttemptLog {
            inner: Arc::default(),
            cap,
        }
    }

    pub fn append(&self, bytes: &[u8]) {
        let mut buf = self.inner.lock().expect("log buffer lock");
        if buf.closed {
            return;
        }
        let room = self.cap.saturating_sub(buf.bytes.len());
        if bytes.len() > room {
            buf.truncated = true;
        }
        buf.bytes.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Appends one line; the message is never copied past what the log has room for.
    pub fn line(&self, level: &str, message: &str) {
        self.append(b"[");
        self.append(level.as_bytes());
        self.append(b"] ");
        self.append(message.as_bytes());
        self.append(b"\n");
    }

    /// Keeps nothing written from now on, silently (not as truncation).
    pub fn close(&self) {
        self.inner.lock().expect("log buffer lock").closed = true;
    }

    /// Notes the panic a guest reported (already bounded), in place of any before it.
    pub fn note_panic(&self, report: String) {
        self.inner.lock().expect("log buffer lock").panic = Some(report);
    }

    /// The last panic the guest reported, if any.
    pub fn panic(&self) -> Option<String> {
        self.inner.lock().expect("log buffer lock").panic.clone()
    }

    /// The text so far, safe to store (invalid UTF-8 and NUL replaced) and still within
    /// the cap once replaced, and whether some was dropped.
    pub fn contents(&self) -> (String, bool) {
        let buf = self.inner.lock().expect("log buffer lock");
        let text = String::from_utf8_lossy(&buf.bytes);
        let (stored, cut) = crate::rules::guest_text::for_storage_cut(&text, self.cap);
        (stored, buf.truncated || cut)
    }
}

impl AttemptLog {
    /// Bytes kept so far: a cheap look at whether anything was written since.
    pub fn written(&self) -> usize {
        self.inner.lock().expect("log buffer lock").bytes.len()
    }

    /// Its complete lines so far, stored as [`Self::contents`] stores the whole log, and
    /// whether some was dropped: always a prefix of what `contents` gives later, since a
    /// newline ends any sequence invalid UTF-8 is replaced in, so a live view of the log
    /// only ever appends to what it showed.
    pub fn complete_lines(&self) -> (String, bool) {
        let buf = self.inner.lock().expect("log buffer lock");
        let end = buf
            .bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&buf.bytes[..end]);
        let (stored, cut) = crate::rules::guest_text::for_storage_cut(&text, self.cap);
        (stored, buf.truncated || cut)
    }
}

impl IsTerminal for AttemptLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for AttemptLog {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for AttemptLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_nul_and_invalid_bytes_safely() {
        let log = AttemptLog::new(64);
        log.append(b"a\0b\xff\n");
        assert_eq!(log.contents().0, "a\u{2400}b\u{fffd}\n");
    }

    #[test]
    fn what_is_stored_stays_within_the_cap_once_replaced() {
        let log = AttemptLog::new(64);
        log.append(&[0u8; 64]);
        let (text, truncated) = log.contents();
        assert!(text.len() <= 64 && text.starts_with('\u{2400}'), "{text:?}");
        assert!(truncated);
        let log = AttemptLog::new(64);
        log.append(&[0xff; 64]);
        assert!(log.contents().0.len() <= 64);
    }

    #[test]
    fn complete_lines_are_a_prefix_of_the_whole_log() {
        let log = AttemptLog::new(64);
        log.append(b"one \xff\0\n two \xe2\x82");
        let (live, truncated) = log.complete_lines();
        assert_eq!(live, "one \u{fffd}\u{2400}\n");
        assert!(!truncated);
        log.append(b"\xac\n");
        let (whole, _) = log.contents();
        assert_eq!(whole, "one \u{fffd}\u{2400}\n two \u{20ac}\n");
        assert!(whole.starts_with(&live));
        assert_eq!(log.complete_lines().0, whole);
        log.append(&[b'x'; 80]);
        let (cut, truncated) = log.complete_lines();
        assert!(truncated && whole.starts_with(&cut) && cut.len() <= 64);
    }

    #[test]
    fn keeps_up_to_the_cap_and_marks_truncation() {
        let log = AttemptLog::new(16);
        log.line("info", "hello");
        assert_eq!(log.contents(), ("[info] hello\n".to_string(), false));
        log.append(b"0123456789");
        let (text, truncated) = log.contents();
        assert_eq!(text.len(), 16);
        assert!(truncated);
    }
}
