//! Serves the API's connections within bounds, so that clients that are slow, idle or
//! many cannot hold the host's sockets, memory or shutdown: a time limit on a request's
//! head (also on a kept-alive connection waiting for its next request), a time and size
//! limit on its body, a time limit on a client that stops reading its answer, a bound on
//! each connection's buffers, and a cap on open connections.

use super::error::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Longest a client may take to send a request's head, and longest a kept-alive
    /// connection waits for its next request: past it the connection is closed.
    pub header_timeout: Duration,
    /// Longest a request's body may take to arrive (past it the client is answered
    /// `408 request_timeout`), and longest a client may leave its answer unread (past it
    /// the connection is closed).
    pub request_timeout: Duration,
    /// Most connections open at once: one more is answered `503 too_many_connections`
    /// and closed.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

/// A connection's read and write buffers: a request head must fit (bodies stream through
/// it), so an open connection holds at most this much of the host's memory.
const CONNECTION_BUFFER: usize = 64 * 1024;

/// Largest request body: a payload is at most 256 KiB of JSON (`json_rule`), and the
/// body that carries it a little more. Bodies are read whole before a handler runs, so
/// the open connections hold at most `max_connections` times this.
pub const MAX_BODY: usize = 512 * 1024;

/// Connections past the cap being answered at once, and for how long each.
const REFUSALS: usize = 64;
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// How often the cap being reached is logged, at most.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `stop` turns true; then stops accepting, lets each
/// open connection finish the request it is in, and returns once all are closed. Ending
/// early is the caller's choice: dropping this future closes every connection.
pub async fn serve_api(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let router = router.layer(axum::middleware::from_fn_with_state(
        limits.request_timeout,
        read_body,
    ));
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS));
    let mut connections = JoinSet::new();
    let mut cap_warned: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: the next accept may succeed once some close.
                tracing::warn!(kind = ?e.kind(), "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                connections.spawn(serve_connection(
                    stream,
                    router.clone(),
                    limits,
                    stop.clone(),
                    permit,
                ));
            }
            Err(_) => {
                if cap_warned.is_none_or(|at| at.elapsed() >= CAP_WARNING_EVERY) {
                    tracing::warn!(
                        code = "too_many_connections",
                        max_connections = limits.max_connections,
                        "connection cap reached: new connections are refused"
                    );
                    cap_warned = Some(Instant::now());
                }
                refuse(stream, &refusals);
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    _open: OwnedSemaphorePermit,
) {
    // Answers are small and written whole: sending them at once saves a delayed ACK.
    let _ = stream.set_nodelay(true);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(CONNECTION_BUFFER);
    let io = TokioIo::new(WriteStall::new(stream, limits.request_timeout));
    let connection = builder.serve_connection(io, TowerToHyperService::new(router));
    tokio::pin!(connection);
    let stopping = tokio::select! {
        ended = connection.as_mut() => Err(ended),
        _ = stop.wait_for(|stopped| *stopped) => Ok(()),
    };
    let ended = match stopping {
        Err(ended) => ended,
        Ok(()) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(
            timeout = e.is_timeout(),
            "API connection ended with an error"
        );
    }
}

/// Answers a connection past the cap, then closes it: the answer is written, the sending
/// side shut, and what the client had sent read and dropped (closing a socket with unread
/// bytes would reset it, and the client might never see the answer), all within
/// `REFUSAL_TIME`. At most `REFUSALS` are being answered at once; past them a connection
/// is closed unanswered.
fn refuse(mut stream: TcpStream, refusals: &Arc<Semaphore>) {
    const BODY: &str = r#"{"error":{"code":"too_many_connections","message":"the host has too many open connections; try again later"}}"#;
    let Ok(refusing) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _refusing = refusing;
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{BODY}",
            BODY.len()
        );
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
    });
}

/// Reads a request's body whole, within `request_timeout` and `MAX_BODY`, before any
/// handler sees the request: a client that sends slowly is answered
/// `408 request_timeout`, one that sends too much `413 body_too_large`, and neither has
/// started anything. The handler itself is not timed: it is never dropped halfway (its
/// database calls have their own bounds).
async fn read_body(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(limit, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) if too_large(&e) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("a request body is at most {MAX_BODY} bytes"),
            )
            .into_response();
        }
        Ok(Err(_)) => {
            return ApiError::invalid("the request's body could not be read").into_response();
        }
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request's body took too long to arrive",
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

fn too_large(error: &axum::Error) -> bool {
    std::error::Error::source(error)
        .is_some_and(|cause| cause.is::<http_body_util::LengthLimitError>())
}

/// A connection whose writes fail once they have waited `limit` on a client that reads
/// nothing: such a client would otherwise hold its connection, and a place under the cap,
/// for ever.
struct WriteStall {
    stream: TcpStream,
    limit: Duration,
    /// Since when writes have been waiting, as the timer that ends the wait.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteStall {
    fn new(stream: TcpStream, limit: Duration) -> Self {
        WriteStall {
            stream,
            limit,
            waiting: None,
        }
    }

    /// What a write that returned `polled` gives: its result if it made progress, an
    /// error once it has waited too long.
    fn bound<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteStall {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteStall {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.bound(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.bound(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.bound(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.bound(polled, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    async fn pair(limit: Duration) -> (WriteStall, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (WriteStall::new(server, limit), client)
    }

    #[tokio::test]
    async fn a_write_the_client_never_reads_fails_after_the_limit() {
        let (mut stalled, _client) = pair(Duration::from_millis(200)).await;
        let chunk = vec![0u8; 1 << 20];
        let start = Instant::now();
        let error = loop {
            if let Err(e) = stalled.write_all(&chunk).await {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "never stalled");
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_client_that_reads_is_never_cut_off() {
        let (mut writer, mut client) = pair(Duration::from_secs(3)).await;
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            client.read_to_end(&mut all).await.map(|_| all.len())
        });
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..32 {
            writer.write_all(&chunk).await.unwrap();
        }
        writer.shutdown().await.unwrap();
        drop(writer);
        assert_eq!(reader.await.unwrap().unwrap(), 32 << 20);
    }
}
