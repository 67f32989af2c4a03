//! A TCP proxy in front of Postgres that a test can cut and restore, to take the
//! database away from a host mid-run.

use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct State {
    open: bool,
    links: Vec<JoinHandle<()>>,
}

pub struct Proxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            open: true,
            links: Vec::new(),
        }));
        let target = target.to_string();
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut state = shared.lock().unwrap();
                if !state.open {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                state.links.push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Proxy {
            port,
            state,
            accept,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        let mut state = self.state.lock().unwrap();
        state.open = false;
        for link in state.links.drain(..) {
            link.abort();
        }
    }

    pub fn restore(&self) {
        self.state.lock().unwrap().open = true;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
