//! The http layer's state: what the host's loops and the API's handlers share (built by
//! `serve`), the console's history and pulse on this host, and the runs its clients wait
//! for (`run_wait`).

use super::error::ApiError;
use crate::service::app::App;
use crate::service::catalog::Catalog;
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, watch};
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
    pub run_watch: RunWatch,
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

/// Most runs a host watches at once: a wait for one more answers 503 `too_many_waiters`.
pub const MAX_WATCHED: usize = 10_000;

/// The statuses of the runs waited for, by id, as last read.
type States = Arc<HashMap<String, String>>;

/// The runs this host's clients wait for, and their statuses as last read.
pub struct RunWatch {
    /// How many clients wait for each run.
    waiting: Mutex<HashMap<String, usize>>,
    states: watch::Sender<States>,
    /// Wakes the watcher when a first client waits.
    wake: Notify,
}

impl Default for RunWatch {
    fn default() -> Self {
        RunWatch {
            waiting: Mutex::new(HashMap::new()),
            states: watch::channel(States::default()).0,
            wake: Notify::new(),
        }
    }
}

impl RunWatch {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The runs waited for now.
    pub(super) fn watched(&self) -> Vec<String> {
        self.waiting().keys().cloned().collect()
    }

    /// Returns once a client waits (at once if one came since the last call).
    pub(super) async fn first_waiter(&self) {
        self.wake.notified().await
    }

    /// Hands every waiter the statuses just read.
    pub(super) fn publish(&self, states: HashMap<String, String>) {
        self.states.send_replace(Arc::new(states));
    }

    /// Watches run `id` until the returned waiter is dropped.
    pub(super) fn wait_for(&self, id: &str) -> Result<Waiter<'_>, ApiError> {
        let mut waiting = self.waiting();
        if !waiting.contains_key(id) && waiting.len() >= MAX_WATCHED {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_waiters",
                format!("this host watches {MAX_WATCHED} runs already; try again later"),
            ));
        }
        *waiting.entry(id.to_string()).or_default() += 1;
        self.wake.notify_one();
        Ok(Waiter {
            watch: self,
            id: id.to_string(),
            states: self.states.subscribe(),
        })
    }
}

/// One client waiting for one run.
pub(super) struct Waiter<'a> {
    watch: &'a RunWatch,
    id: String,
    states: watch::Receiver<States>,
}

impl Waiter<'_> {
    /// The run's status once it is read as other than `seen`, or `None` at `deadline`.
    pub(super) async fn next_status(&mut self, seen: &str, deadline: Instant) -> Option<String> {
        loop {
            let now = self.states.borrow_and_update().get(&self.id).cloned();
            if let Some(status) = now.filter(|s| s != seen) {
                return Some(status);
            }
            tokio::select! {
                changed = self.states.changed() => changed.ok()?,
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut waiting = self.watch.waiting();
        if let Some(count) = waiting.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                waiting.remove(&self.id);
            }
        }
    }
}
