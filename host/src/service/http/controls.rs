//! The operator's controls over HTTP: cancel and retry a run or every run a filter
//! matches (`crate::runs::controls`), and pauses (`crate::queue::pause`). An action by filter changes
//! nothing unless its body says `"confirm": true`; without it the answer is the count it
//! would touch, which the page shows before asking.

use super::audit::AuditNote;
use super::error::{ApiError, ErrorBody};
use super::params::{self, ApiPath, ApiQuery};
use super::run_filter::{RunsQuery, run_filter};
use super::state::Shared;
use super::visible::{operator_only, present};
use crate::rules::tenant::Principal;
use crate::runs::controls::{Action, Actor, ControlError, Controls};
use crate::service::retention::PURGE_BATCH;
use crate::service::views;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// Most runs a bulk action's preview counts.
const PREVIEW_CAP: i64 = 100_000;
/// Most runs `GET /runs/count` counts: the runs view asks on every refresh, and counting a
/// hundred thousand runs takes the database 150 ms.
const COUNT_CAP: i64 = 10_000;

fn controls(s: &Shared) -> Controls<'_> {
    Controls {
        store: &s.app.store,
        metrics: &s.app.metrics,
        runner: Some(&s.app.runner),
    }
}

fn actor(who: &Principal) -> Actor<'_> {
    Actor {
        tenant: who.tenant(),
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::UnknownRun(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_run", e.to_string())
            }
            ControlError::NotCancellable { .. } => {
                ApiError::new(StatusCode::CONFLICT, "not_cancellable", e.to_string())
            }
            ControlError::NotRetryable { .. } => {
                ApiError::new(StatusCode::CONFLICT, "not_retryable", e.to_string())
            }
            ControlError::Store(e) => e.into(),
        }
    }
}

fn unknown_run(id: &str) -> ApiError {
    ControlError::UnknownRun(id.to_string()).into()
}

/// A run an operator cancelled.
#[derive(Serialize, ToSchema)]
pub(super) struct Cancelled {
    #[schema(value_type = views::RunView)]
    run: Value,
    cancelled: bool,
}

#[utoipa::path(post, path = "/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Cancelled: a queued run never starts, a running one is stopped and fenced", body = Cancelled),
        (status = 404, description = "`unknown_run`", body = ErrorBody),
        (status = 409, description = "`not_cancellable`: it ended", body = ErrorBody)))]
pub(super) async fn cancel_run(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Cancelled>, ApiError> {
    if !params::is_run_id(&id) {
        return Err(unknown_run(&id));
    }
    let run = controls(&s).cancel(actor(&who), &id).await?;
    s.app.wake.notify_one();
    Ok(Json(Cancelled {
        run: present(&who, views::run(&run)),
        cancelled: true,
    }))
}

/// A run's retry: a new run linked to it.
#[derive(Serialize, ToSchema)]
pub(super) struct Retried {
    #[schema(value_type = views::RunView)]
    run: Value,
    retry_of: String,
    /// It was retried before: this is that retry.
    already: bool,
}

#[utoipa::path(post, path = "/runs/{id}/retry", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 201, description = "The new run", body = Retried),
        (status = 200, description = "It was retried before (`already`)", body = Retried),
        (status = 404, description = "`unknown_run`", body = ErrorBody),
        (status = 409, description = "`not_retryable`: not failed, crashed or cancelled", body = ErrorBody)))]
pub(super) async fn retry_run(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<Retried>), ApiError> {
    if !params::is_run_id(&id) {
        return Err(unknown_run(&id));
    }
    let retry = controls(&s).retry(actor(&who), &id).await?;
    s.app.wake.notify_one();
    let status = if retry.already {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(Retried {
            run: present(&who, views::run(&retry.run)),
            retry_of: id,
            already: retry.already,
        }),
    ))
}

/// How many runs a filter matches, counted up to a cap.
#[derive(Serialize, ToSchema)]
pub(super) struct Counted {
    count: i64,
    /// The count reached its cap: there may be more.
    capped: bool,
}

#[utoipa::path(get, path = "/runs/count", tag = "runs", params(RunsQuery),
    responses(
        (status = 200, description = "How many runs the filter matches (up to 10 000)", body = Counted),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn count_runs(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Json<Counted>, ApiError> {
    let filter = run_filter(&s, &who, q).await?;
    let count = s.app.store.count_matching_runs(&filter, COUNT_CAP).await?;
    Ok(Json(Counted {
        count,
        capped: count >= COUNT_CAP,
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkBody {
    /// The runs it acts on, as `GET /runs` filters them (no `limit` or `before`).
    #[serde(default)]
    filter: RunsQuery,
    /// Without it, only the count is answered and nothing changes.
    #[serde(default)]
    confirm: bool,
}

/// What an action by filter did, or without `confirm` would touch.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum BulkAnswer {
    Preview {
        count: i64,
        capped: bool,
        /// Always false: nothing was changed.
        confirmed: bool,
    },
    Done {
        /// Runs acted on by this call (at most 1 000).
        done: i64,
        /// More runs match: call again.
        more: bool,
    },
}

#[utoipa::path(post, path = "/runs/cancel", tag = "runs", request_body = BulkBody,
    responses(
        (status = 200, description = "The count (no `confirm`), or how many were cancelled", body = BulkAnswer),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn cancel_matching(
    s: State<Arc<Shared>>,
    who: Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(Extension<AuditNote>, Json<BulkAnswer>), ApiError> {
    by_filter(s, who, Action::Cancel, &body).await
}

#[utoipa::path(post, path = "/runs/retry", tag = "runs", request_body = BulkBody,
    responses(
        (status = 200, description = "The count (no `confirm`), or how many were retried", body = BulkAnswer),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn retry_matching(
    s: State<Arc<Shared>>,
    who: Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(Extension<AuditNote>, Json<BulkAnswer>), ApiError> {
    by_filter(s, who, Action::Retry, &body).await
}

async fn by_filter(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    action: Action,
    body: &[u8],
) -> Result<(Extension<AuditNote>, Json<BulkAnswer>), ApiError> {
    let body = bulk_body(body)?;
    let filter = run_filter(&s, &who, body.filter).await?;
    let controls = controls(&s);
    if !body.confirm {
        return Ok(preview(
            controls.preview(action, &filter, PREVIEW_CAP).await?,
        ));
    }
    let bulk = controls.apply(actor(&who), action, &filter).await?;
    s.app.wake.notify_one();
    let done = AuditNote {
        object: Some(format!("runs: {} by filter", bulk.done)),
        ..AuditNote::default()
    };
    Ok((
        Extension(done),
        Json(BulkAnswer::Done {
            done: bulk.done,
            more: bulk.more,
        }),
    ))
}

/// What an action by filter answers without `confirm`: how many runs it would take
/// (counted up to [`PREVIEW_CAP`]), audited as a preview.
fn preview(count: i64) -> (Extension<AuditNote>, Json<BulkAnswer>) {
    let note = AuditNote {
        preview: true,
        ..AuditNote::default()
    };
    (
        Extension(note),
        Json(BulkAnswer::Preview {
            count,
            capped: count >= PREVIEW_CAP,
            confirmed: false,
        }),
    )
}

/// `POST /runs/purge` `{"filter", "confirm"}`: deletes the ended runs a filter matches
/// (their endings delivered), with their attempts, logs, journals and steps, beyond
/// retention; without `confirm`, only how many it would. The operator's only: to a
/// tenant's token the path does not exist.
#[utoipa::path(post, path = "/runs/purge", tag = "runs", request_body = BulkBody,
    responses(
        (status = 200, description = "The count of ended runs it would delete (no `confirm`), or how many it deleted (at most 1 000 a call)", body = BulkAnswer),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn purge_matching(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(Extension<AuditNote>, Json<BulkAnswer>), ApiError> {
    operator_only(&who)?;
    let body = bulk_body(&body)?;
    let filter = run_filter(&s, &who, body.filter).await?;
    if !body.confirm {
        return Ok(preview(
            s.app.store.count_purgeable(&filter, PREVIEW_CAP).await?,
        ));
    }
    // At most `PURGE_BATCH` rows, so the count fits.
    let done = s.app.store.purge_runs(&filter, PURGE_BATCH).await? as i64;
    tracing::info!(runs = done, "runs purged by filter");
    let note = AuditNote {
        object: Some(format!("runs: {done} purged by filter")),
        ..AuditNote::default()
    };
    Ok((
        Extension(note),
        Json(BulkAnswer::Done {
            done,
            more: done == PURGE_BATCH,
        }),
    ))
}

/// A bulk action's body, read and checked: every run the filter matches, so no page.
fn bulk_body(body: &[u8]) -> Result<BulkBody, ApiError> {
    let body: BulkBody = serde_json::from_slice(body).map_err(|_| {
        ApiError::invalid(
            "the body must be a JSON object: `filter` (job, status, code, tenant, instance, q, \
             since, until) and `confirm`",
        )
    })?;
    if body.filter.limit.is_some() || body.filter.before.is_some() {
        return Err(ApiError::invalid(
            "filter: an action by filter takes every run it matches; leave out limit and before",
        ));
    }
    Ok(body)
}

/// `GET /pauses`.
#[derive(Serialize, ToSchema)]
pub(super) struct PauseList {
    #[schema(value_type = Vec<views::PauseView>)]
    pauses: Vec<Value>,
}

#[utoipa::path(get, path = "/pauses", tag = "pauses",
    responses(
        (status = 200, description = "What is paused", body = PauseList),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn list_pauses(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<PauseList>, ApiError> {
    operator_only(&who)?;
    let pauses = s.app.runner.pauses().current().await?;
    let pauses = pauses.pauses.iter().map(views::pause).collect();
    Ok(Json(PauseList { pauses }))
}

/// A pause or resume: `changed` says whether it was otherwise before.
#[derive(Serialize, ToSchema)]
pub(super) struct PauseChange {
    /// `job`, `tenant` or `lane`.
    scope: String,
    name: String,
    paused: bool,
    changed: bool,
}

#[utoipa::path(post, path = "/pauses/{scope}/{name}", tag = "pauses",
    params(("scope" = String, Path, description = "`job`, `tenant` or `lane`"),
        ("name" = String, Path, description = "What it names")),
    responses(
        (status = 200, description = "Paused: its queued runs wait, running ones finish", body = PauseChange),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn pause(
    s: State<Arc<Shared>>,
    who: Extension<Principal>,
    path: ApiPath<(String, String)>,
) -> Result<Json<PauseChange>, ApiError> {
    set_paused(s, who, path, true).await
}

#[utoipa::path(delete, path = "/pauses/{scope}/{name}", tag = "pauses",
    params(("scope" = String, Path, description = "`job`, `tenant` or `lane`"),
        ("name" = String, Path, description = "What it names")),
    responses(
        (status = 200, description = "Resumed", body = PauseChange),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn resume(
    s: State<Arc<Shared>>,
    who: Extension<Principal>,
    path: ApiPath<(String, String)>,
) -> Result<Json<PauseChange>, ApiError> {
    set_paused(s, who, path, false).await
}

/// Pauses (`paused`) or resumes `scope`/`name`; `changed` says whether it was otherwise.
async fn set_paused(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath((scope, name)): ApiPath<(String, String)>,
    paused: bool,
) -> Result<Json<PauseChange>, ApiError> {
    operator_only(&who)?;
    let scope = checked(&scope, &name)?;
    let pauses = s.app.runner.pauses();
    let changed = if paused {
        pauses.pause(scope, &name).await?
    } else {
        pauses.resume(scope, &name).await?
    };
    if changed {
        let action = if paused { "pause" } else { "resume" };
        s.app.metrics.pause_changed(action, scope.as_str(), &name);
        tracing::info!(scope = scope.as_str(), name = %name, action, "pause changed");
        if !paused {
            s.app.wake.notify_one();
        }
    }
    Ok(Json(PauseChange {
        scope: scope.as_str().to_string(),
        name,
        paused,
        changed,
    }))
}

fn checked(scope: &str, name: &str) -> Result<crate::queue::pause::Scope, ApiError> {
    crate::queue::pause::validate(scope, name).map_err(|e| ApiError::invalid(e.to_string()))
}
