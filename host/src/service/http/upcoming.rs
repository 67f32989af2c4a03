//! `GET /upcoming`: what is due later, soonest first — queued runs due after now (a start's
//! `run_at` or `delay`, a retry waiting out its backoff, a signal's timeout) and the next
//! fires of the schedules — as the caller may see them (a tenant: its own runs, and the
//! schedules of the jobs it sees).

use super::error::ApiResult;
use super::params::ApiQuery;
use super::state::Shared;
use super::visible::{present, sees_job};
use crate::rules::tenant::Principal;
use crate::service::views;
use axum::Json;
use axum::extract::{Extension, State};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Most fires of one schedule listed: a job firing every second does not fill the list.
const FIRES_PER_JOB: usize = 20;

#[derive(Deserialize)]
pub(super) struct UpcomingQuery {
    limit: Option<i64>,
}

pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<UpcomingQuery>,
) -> ApiResult {
    let limit = views::page_size(q.limit);
    let runs = s.app.store.future_runs(who.tenant(), limit).await?;
    let mut due: Vec<(i64, Value)> = runs
        .iter()
        .map(|run| {
            let why = if run.waiting_signal().is_some() {
                "signal timeout"
            } else if run.failures > 0 {
                "retry"
            } else {
                "scheduled"
            };
            let mut view = present(&who, views::run(run));
            view["why"] = why.into();
            (
                run.next_attempt_at,
                json!({"kind": "run", "at": views::time(run.next_attempt_at), "run": view}),
            )
        })
        .collect();
    for job in s.app.store.list_jobs().await? {
        let cron = s.catalog.get(&job.name).and_then(|j| j.cron.clone());
        let (Some(cron), Some(first)) = (cron, job.next_fire_at) else {
            continue;
        };
        if job.orphaned_at.is_some() || !sees_job(&who, &job) {
            continue;
        }
        let fires = std::iter::successors(Some(first), |t| cron.next_after(*t));
        for at in fires.take(FIRES_PER_JOB) {
            let fire = json!({
                "kind": "fire",
                "at": views::time(at),
                "job": job.name,
                "schedule": job.schedule,
            });
            due.push((at, fire));
        }
    }
    due.sort_by_key(|(at, _)| *at);
    let listed: Vec<Value> = due
        .into_iter()
        .take(limit as usize)
        .map(|(_, v)| v)
        .collect();
    Ok(Json(json!({ "upcoming": listed, "limit": limit })))
}
