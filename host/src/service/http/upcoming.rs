//! `GET /upcoming`: what is due later, soonest first — queued runs due after now (a start's
//! `run_at` or `delay`, a retry waiting out its backoff, a signal's timeout) and the next
//! fires of the schedules — as the caller may see them (a tenant: its own runs, and the
//! schedules of the jobs it sees).

use super::error::{ApiError, ErrorBody};
use super::params::ApiQuery;
use super::state::Shared;
use super::visible::{present, sees_job};
use crate::rules::tenant::Principal;
use crate::service::views;
use axum::Json;
use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// Most fires of one schedule listed: a job firing every second does not fill the list.
const FIRES_PER_JOB: usize = 20;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct UpcomingQuery {
    limit: Option<i64>,
}

/// `GET /upcoming`.
#[derive(Serialize, ToSchema)]
pub(super) struct UpcomingList {
    upcoming: Vec<Due>,
    limit: i64,
}

/// Something due later: a queued run, or a schedule's fire.
#[derive(Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Due {
    Run {
        at: String,
        /// The run's view, with `why`: `scheduled`, `retry` or `signal timeout`.
        #[schema(value_type = views::RunView)]
        run: Value,
    },
    Fire {
        at: String,
        job: String,
        schedule: Option<String>,
    },
}

#[utoipa::path(get, path = "/upcoming", tag = "console", params(UpcomingQuery),
    responses(
        (status = 200, description = "What is due later, soonest first", body = UpcomingList),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<UpcomingQuery>,
) -> Result<Json<UpcomingList>, ApiError> {
    let limit = views::page_size(q.limit);
    let runs = s.app.store.future_runs(who.tenant(), limit).await?;
    let mut due: Vec<(i64, Due)> = runs
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
            let at = views::time(run.next_attempt_at);
            (run.next_attempt_at, Due::Run { at, run: view })
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
            let fire = Due::Fire {
                at: views::time(at),
                job: job.name.clone(),
                schedule: job.schedule.clone(),
            };
            due.push((at, fire));
        }
    }
    due.sort_by_key(|(at, _)| *at);
    let upcoming = due
        .into_iter()
        .take(limit as usize)
        .map(|(_, v)| v)
        .collect();
    Ok(Json(UpcomingList { upcoming, limit }))
}
