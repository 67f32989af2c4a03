//! A local webhook receiver for report tests: it refuses the first `failures` POSTs with
//! a 500, then keeps every JSON body it accepts (and its `traceparent` header).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Seen {
    attempts: usize,
    bodies: Vec<serde_json::Value>,
    traceparents: Vec<Option<String>>,
}

pub struct Hook {
    pub url: String,
    seen: Arc<Mutex<Seen>>,
}

impl Hook {
    pub async fn start(failures: usize) -> Hook {
        use axum::{Json, extract::State, http::StatusCode, routing::post};
        let seen = Arc::new(Mutex::new(Seen::default()));
        let app = axum::Router::new()
            .route(
                "/hook",
                post(
                    move |State(seen): State<Arc<Mutex<Seen>>>,
                          headers: axum::http::HeaderMap,
                          Json(body): Json<serde_json::Value>| async move {
                        let mut seen = seen.lock().unwrap();
                        seen.attempts += 1;
                        if seen.attempts <= failures {
                            return StatusCode::INTERNAL_SERVER_ERROR;
                        }
                        seen.bodies.push(body);
                        let traceparent = headers
                            .get("traceparent")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string);
                        seen.traceparents.push(traceparent);
                        StatusCode::NO_CONTENT
                    },
                ),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Hook {
            url: format!("http://{addr}/hook"),
            seen,
        }
    }

    /// The `traceparent` of each accepted report, in order.
    pub fn traceparents(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().traceparents.clone()
    }

    pub fn attempts(&self) -> usize {
        self.seen.lock().unwrap().attempts
    }

    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let bodies = self.seen.lock().unwrap().bodies.clone();
            if bodies.len() >= n {
                return bodies;
            }
            assert!(
                start.elapsed() < within,
                "webhook got {} of {n} reports",
                bodies.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
