//! Waiting for a run from outside: `GET /runs/{id}?wait=30s` answers once the run ended
//! (or with its state at the timeout), `GET /runs/{id}/events` streams its status changes
//! (server-sent events) until it ends.
//!
//! However many clients wait, a host reads the runs they wait for in one statement every
//! [`WATCH_EVERY`], and none while nobody waits: the watcher publishes their statuses and
//! each waiter looks up its own. A waiter reads the database itself only twice: the run
//! before it waits (its visibility) and the run it answers with.

use super::error::ApiError;
use super::params::ApiPath;
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::store::RunStatus;
use axum::extract::{Extension, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often the runs waited for are read while anyone waits.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);
/// Longest a long poll may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Reads the statuses of the runs waited for every [`WATCH_EVERY`] while any client
/// waits, until `stop`.
pub async fn watch_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let watch = &shared.run_watch;
    loop {
        let ids = watch.watched();
        if ids.is_empty() {
            tokio::select! {
                _ = watch.first_waiter() => continue,
                _ = stop.changed() => return,
            }
        }
        match shared.app.store.run_states(&ids).await {
            Ok(rows) => watch.publish(rows.into_iter().collect()),
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "reading the runs waited for failed")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(WATCH_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

fn ended(status: &str) -> bool {
    RunStatus::parse(status).is_some_and(RunStatus::is_terminal)
}

/// A `wait` as asked: a duration of at most [`MAX_WAIT`].
pub(super) fn wait_of(asked: Option<&str>) -> Result<Option<Duration>, ApiError> {
    let Some(asked) = asked else {
        return Ok(None);
    };
    match crate::rules::units::parse_duration(asked) {
        Ok(wait) if wait <= MAX_WAIT => Ok(Some(wait)),
        _ => Err(ApiError::invalid(
            "wait: a duration of at most 60s, e.g. 30s",
        )),
    }
}

/// Waits up to `wait` for run `id`, in `status` now, to end.
pub(super) async fn until_ended(
    s: &Shared,
    id: &str,
    status: &str,
    wait: Duration,
) -> Result<(), ApiError> {
    if ended(status) {
        return Ok(());
    }
    let deadline = Instant::now() + wait;
    let mut waiter = s.run_watch.wait_for(id)?;
    let mut seen = status.to_string();
    while let Some(now) = waiter.next_status(&seen, deadline).await {
        if ended(&now) {
            break;
        }
        seen = now;
    }
    Ok(())
}

/// A status event's data: the run's id and status, and once it ended its code and result.
fn status_data(run: &crate::store::RunRecord) -> serde_json::Value {
    let mut data = json!({"id": run.id, "status": run.status});
    if ended(&run.status) {
        let shown = crate::service::views::run(run);
        data["code"] = shown["code"].clone();
        data["result"] = shown["result"].clone();
    }
    data
}

/// `GET /runs/{id}/events`: the run's status now, then each change, as `status` events
/// (`{"id", "status"}`); the last, once it ended, also has its `code` and `result`. A
/// stream with no change for [`MAX_WAIT`] ends (the client connects again).
/// Another tenant's run, or none, answers 404.
#[utoipa::path(get, path = "/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Server-sent `status` events, `{\"id\", \"status\"}`; the last, once it ended, with `code` and `result`", body = String, content_type = "text/event-stream"),
        (status = 404, description = "`unknown_run`, also another tenant's", body = super::error::ErrorBody)))]
pub(super) async fn events(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let run = super::visible::visible_run(&s, &who, &id).await?;
    let first = status_data(&run);
    // The stream ends after the run's ending; until then it waits for changes, each
    // bounded by the longest wait so a stream of a run that never changes still ends.
    let stream = futures_util::stream::unfold(
        (s, run.id, run.status, Some(first)),
        move |(s, id, seen, first)| async move {
            if let Some(first) = first {
                let event = Event::default().event("status").data(first.to_string());
                return Some((Ok(event), (s, id, seen, None)));
            }
            if ended(&seen) {
                return None;
            }
            let status = {
                let mut waiter = s.run_watch.wait_for(&id).ok()?;
                waiter.next_status(&seen, Instant::now() + MAX_WAIT).await?
            };
            let data = if ended(&status) {
                status_data(&s.app.store.get_run(&id).await.ok()??)
            } else {
                json!({"id": id, "status": status})
            };
            let event = Event::default().event("status").data(data.to_string());
            Some((Ok(event), (s, id, status, None)))
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
