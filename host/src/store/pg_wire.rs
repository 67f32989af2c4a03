//! The byte stream under a guest's Postgres connection, with a bound on what the server
//! may make the host buffer.
//!
//! Every message from the server starts with a type byte and a 4-byte length. The driver
//! reads a whole message into memory before it looks at it, so a guest asking for a row
//! of 400 MB would make the host allocate 400 MB before any limit could refuse it.
//! [`FrameGuard`] reads the length as the bytes go by and fails the stream as soon as a
//! message announces more than the bound, before its body is read: the host never holds
//! more of it than one read buffer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where the reader is in the server's stream of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Inside a message header: `have` of its 5 bytes are in `header`.
    Header { have: usize },
    /// Inside a message body, with `left` bytes to go.
    Body { left: usize },
}

pub struct FrameGuard<S> {
    inner: S,
    max_body: usize,
    position: Position,
    header: [u8; 5],
    /// Set once a message over the bound was announced: the connection is refused.
    tripped: Arc<AtomicBool>,
}

impl<S> FrameGuard<S> {
    /// Wraps a stream that has passed no server message yet.
    pub fn new(inner: S, max_body: usize, tripped: Arc<AtomicBool>) -> Self {
        FrameGuard {
            inner,
            max_body,
            position: Position::Header { have: 0 },
            header: [0; 5],
            tripped,
        }
    }

    /// Follows the messages in `bytes`; fails at a header announcing too large a body.
    fn follow(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.position {
                Position::Header { have } => {
                    let take = (5 - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if have + take < 5 {
                        self.position = Position::Header { have: have + take };
                        continue;
                    }
                    let length = u32::from_be_bytes(
                        self.header[1..5].try_into().expect("four length bytes"),
                    ) as usize;
                    let body = length.checked_sub(4).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "malformed message length")
                    })?;
                    if body > self.max_body {
                        self.tripped.store(true, Ordering::Release);
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the server sent a message larger than the guest's bound",
                        ));
                    }
                    self.position = if body == 0 {
                        Position::Header { have: 0 }
                    } else {
                        Position::Body { left: body }
                    };
                }
                Position::Body { left } => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.position = if take == left {
                        Position::Header { have: 0 }
                    } else {
                        Position::Body { left: left - take }
                    };
                }
            }
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrameGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tripped.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the connection was refused for a message over the bound",
            )));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled()[before..].to_vec();
                Poll::Ready(self.follow(&read))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrameGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A TCP or Unix socket to the server.
pub enum Socket {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn follows_messages_split_anywhere_and_refuses_a_large_one_by_its_header() {
        let mut stream = Vec::new();
        for n in [0, 1, 7, 100] {
            stream.extend(message(b'D', &vec![0; n]));
        }
        for split in 1..stream.len() {
            let tripped = Arc::new(AtomicBool::new(false));
            let mut guard = FrameGuard::new((), 100, tripped.clone());
            for chunk in stream.chunks(split) {
                guard.follow(chunk).unwrap();
            }
            assert_eq!(guard.position, Position::Header { have: 0 });
            assert!(!tripped.load(Ordering::Acquire));
        }
        // Only the header of the oversized message is needed to refuse it.
        let tripped = Arc::new(AtomicBool::new(false));
        let mut guard = FrameGuard::new((), 100, tripped.clone());
        let big = message(b'D', &[0; 101]);
        assert!(guard.follow(&big[..5]).is_err());
        assert!(tripped.load(Ordering::Acquire));
    }
}
