//! The http layer's state: what the host's loops and the API's handlers share (built by
//! `serve`), and the console's history and pulse on this host.

use super::error::ApiError;
use crate::service::app::App;
use crate::service::catalog::Catalog;
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often the pulse is read while a page listens.
pub const PULSE_EVERY: Duration = Duration::from_secs(2);

/// What the loops and the HTTP handlers share.
pub struct Shared {
    pub app: App,
    pub catalog: Arc<Catalog>,
    pub draining: AtomicBool,
    /// The fleet's gauges as `/metrics` last read them, and when.
    pub gauges: tokio::sync::Mutex<Option<(Instant, Arc<Vec<crate::runs::metrics::Gauge>>)>>,
    /// This host's lanes and their workers.
    pub lanes: BTreeMap<String, usize>,
    /// The console's lane history and live pulse.
    pub console: Console,
    /// Where a run's trace is shown (`ServeConfig::trace_url`).
    pub trace_url: Option<String>,
    /// The runs this host's clients wait for (`run_wait`).
    pub run_watch: super::run_wait::RunWatch,
}

/// A draining host takes no new work: the caller is told to `elsewhere` (another host).
pub(super) fn refuse_if_draining(s: &Shared, elsewhere: &str) -> Result<(), ApiError> {
    if s.draining.load(Ordering::Acquire) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            format!("this host is shutting down; {elsewhere}"),
        ));
    }
    Ok(())
}

/// One lane at one moment.
#[derive(Debug, Clone)]
pub(super) struct LaneSample {
    pub(super) at: i64,
    pub(super) lane: String,
    pub(super) depth: i64,
    pub(super) lag_ms: i64,
    pub(super) busy: usize,
}

/// The console's state on this host: lane history, the latest pulse, and the views read
/// within the last pulse.
pub struct Console {
    pub(super) samples: Mutex<VecDeque<LaneSample>>,
    pub(super) pulse: watch::Sender<Value>,
    /// Overviews and job statistics by what was asked (window, job, tenant): every page
    /// that refreshes on one pulse gets the one read, so open pages do not multiply the
    /// database's work.
    pub(super) views: tokio::sync::Mutex<BTreeMap<String, (std::time::Instant, Value)>>,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            samples: Mutex::new(VecDeque::new()),
            pulse: watch::channel(Value::Null).0,
            views: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }
}

impl Console {
    pub(super) fn samples(&self) -> std::sync::MutexGuard<'_, VecDeque<LaneSample>> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The view `key` as read within the last [`PULSE_EVERY`], else read now by `read`
    /// (callers asking meanwhile wait for that one read).
    pub(super) async fn shared_view<F>(&self, key: String, read: F) -> Result<Value, ApiError>
    where
        F: std::future::Future<Output = Result<Value, ApiError>>,
    {
        let mut views = self.views.lock().await;
        if let Some((at, value)) = views.get(&key)
            && at.elapsed() < PULSE_EVERY
        {
            return Ok(value.clone());
        }
        let value = read.await?;
        views.retain(|_, (at, _)| at.elapsed() < PULSE_EVERY);
        views.insert(key, (std::time::Instant::now(), value.clone()));
        Ok(value)
    }
}
