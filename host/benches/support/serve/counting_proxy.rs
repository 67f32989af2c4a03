//! A TCP proxy in front of the Postgres server that counts the round trips its clients make
//! (the `trips` part).

use crate::postgres;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the counting proxy saw.
#[derive(Clone, Copy)]
pub struct Counted {
    pub connections: u64,
    pub queries: u64,
    pub syncs: u64,
}

impl std::ops::Sub for Counted {
    type Output = Counted;
    fn sub(self, earlier: Counted) -> Counted {
        Counted {
            connections: self.connections - earlier.connections,
            queries: self.queries - earlier.queries,
            syncs: self.syncs - earlier.syncs,
        }
    }
}

/// A TCP proxy in front of the Postgres server that counts what its clients send: simple
/// queries (`Q`) and extended-protocol syncs (`S`), each a round trip.
pub struct CountingProxy {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
    pub accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
pub struct Counts {
    pub connections: AtomicU64,
    pub queries: AtomicU64,
    pub syncs: AtomicU64,
}

impl CountingProxy {
    pub async fn start() -> CountingProxy {
        let server = url::Url::parse(&postgres::admin_url()).expect("a Postgres URL");
        let upstream = format!(
            "{}:{}",
            server.host_str().expect("a Postgres host"),
            server.port().unwrap_or(5432)
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, upstream.clone(), shared.clone()));
            }
        });
        CountingProxy {
            addr,
            counts,
            accept,
        }
    }

    /// `db_url` through the proxy, without TLS (the proxy reads the protocol).
    pub fn url(&self, db_url: &str) -> String {
        let mut url = url::Url::parse(db_url).expect("a Postgres URL");
        url.set_host(Some(&self.addr.ip().to_string()))
            .expect("a host");
        url.set_port(Some(self.addr.port())).expect("a port");
        url.query_pairs_mut().append_pair("sslmode", "disable");
        url.to_string()
    }

    pub fn counted(&self) -> Counted {
        Counted {
            connections: self.counts.connections.load(Ordering::Relaxed),
            queries: self.counts.queries.load(Ordering::Relaxed),
            syncs: self.counts.syncs.load(Ordering::Relaxed),
        }
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection, counting the client's messages on the way.
pub async fn relay(client: tokio::net::TcpStream, upstream: String, counts: Arc<Counts>) {
    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut frontend = Frontend::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        frontend.feed(&buf[..n], &counts);
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = server_write.shutdown().await;
    let _ = back.await;
}

/// The client's side of the Postgres protocol, as far as counting needs: untyped packets
/// (length, code) until the start-up message (an SSL or GSS request may come first), then
/// typed messages (type byte, length).
#[derive(Default)]
pub struct Frontend {
    pub started: bool,
    pub header: Vec<u8>,
    /// Bytes of the current message's body still to pass.
    pub skip: usize,
}

impl Frontend {
    pub const SSL_REQUEST: u32 = 80_877_103;
    pub const GSSENC_REQUEST: u32 = 80_877_104;

    pub fn feed(&mut self, mut data: &[u8], counts: &Counts) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let want = if self.started { 5 } else { 8 };
            let n = (want - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.header.len() < want {
                return;
            }
            let word = |at: usize| {
                u32::from_be_bytes(self.header[at..at + 4].try_into().expect("four bytes"))
            };
            if self.started {
                match self.header[0] {
                    b'Q' => counts.queries.fetch_add(1, Ordering::Relaxed),
                    b'S' => counts.syncs.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
                self.skip = (word(1) as usize).saturating_sub(4);
            } else {
                let code = word(4);
                self.skip = (word(0) as usize).saturating_sub(8);
                self.started = code != Self::SSL_REQUEST && code != Self::GSSENC_REQUEST;
            }
            self.header.clear();
        }
    }
}
