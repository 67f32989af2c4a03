//! The HTTP API, the metrics endpoint and the operator's console.
//!
//! Errors are JSON `{"error": {"code": ..., "message": ...}}` with a fixed code:
//! `unauthenticated`, `unknown_job`, `unknown_run`, `unknown_tenant`, `not_found`,
//! `tenant_exists`, `tenant_disabled`, `job_orphaned`, `not_cancellable`, `not_retryable`,
//! `unknown_journal`, `unreadable_journal`, `invalid_parameter`, `queue_full` (429: a cap on
//! queued runs, `backlog`), `too_many_waiters` (503: `run_wait`), `shutting_down`, `unavailable`, `request_timeout`, `body_too_large`,
//! `too_many_connections` (`server`), `token_expired` (401, `auth`), `read_only` (403),
//! `unknown_token`, `search_timeout` (503, `payload_search`); one type, `error::ApiError`.
//! Every path and query parameter is read and checked before any query (`params`): an id
//! that no job, run or tenant could have answers 404 as an unknown one does.
//!
//! Everything but the page, the probes, `/metrics` and the links key set needs a bearer
//! token (`auth`). Every route that changes something is registered with its audit action
//! (`audit`): refused to a read-only token, and recorded with its result. A tenant's token sees only its tenant's jobs, runs and reports, through
//! `views::for_tenant`; what belongs to another tenant answers 404, as if it did not exist.
//!
//! A kick, start or emit takes the caller's `traceparent` header (`trace_of`); one that is
//! not well formed is ignored (the host starts a trace), never stored or echoed.

mod audit;
mod auth;
mod controls;
mod dashboard;
mod deliveries;
mod enqueue;
mod error;
mod events;
mod failures;
mod hosts;
mod journals;
mod metrics;
mod openapi;
mod params;
mod payload_search;
mod run_filter;
mod run_wait;
mod server;
mod signals;
mod state;
mod tenants;
mod tokens;
mod upcoming;
mod usage;
mod visible;

use crate::queue::kick;
use crate::rules::audit::Action;
use crate::rules::tenant::Principal;
use crate::service::views;
use audit::Routes;
use axum::Json;
use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use error::{ApiError, ApiResult, ErrorBody};
use params::{ApiPath, ApiQuery};
use run_filter::{RunsQuery, run_filter};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use visible::{present, sees_job, visible_job};

pub use audit::ApiRoute;
pub use dashboard::{pulse_loop, sample_loop};
pub use hosts::heartbeat_loop;
pub use openapi::document as openapi_document;
pub use run_wait::watch_loop;
pub use server::{ConnectionLimits, serve_api};
pub use state::RunWatch;
pub use state::{Console, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    let api = api(Routes::new(Some(shared.clone()))).router.route_layer(
        axum::middleware::from_fn_with_state(shared.clone(), auth::authenticate),
    );
    Router::new()
        .route("/", get(page))
        .route("/console/{file}", get(console_file))
        .route("/healthz", get(healthz))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(openapi::serve))
        .route("/.well-known/jwks.json", get(jwks))
        .merge(api)
        .fallback(|| async { params::not_found() })
        .with_state(shared)
}

/// Every route behind a token, as the router registers it: each change with its audit
/// action (a test performs each one and finds its audit row).
pub fn api_routes() -> Vec<ApiRoute> {
    api(Routes::new(None)).table
}

/// The API behind a token: reads, and changes, each change refused to a read-only token
/// and audited (`audit::record`).
fn api(routes: Routes) -> Routes {
    use Action::*;
    use axum::http::Method;
    routes
        .read("/jobs", list_jobs)
        .read("/jobs/{name}", get_job)
        .change(
            Method::POST,
            "/jobs/{name}/kick",
            RunKick,
            "job",
            enqueue::kick_job,
        )
        .change(
            Method::POST,
            "/jobs/{name}/runs",
            RunStart,
            "job",
            enqueue::start_run,
        )
        .change(
            Method::POST,
            "/jobs/{name}/runs:batch",
            RunStartBatch,
            "job",
            enqueue::start_batch,
        )
        .read("/runs", list_runs)
        .read("/runs/count", controls::count_runs)
        .read("/runs/search", payload_search::search)
        .change(
            Method::POST,
            "/runs/cancel",
            RunsCancel,
            "runs",
            controls::cancel_matching,
        )
        .change(
            Method::POST,
            "/runs/retry",
            RunsRetry,
            "runs",
            controls::retry_matching,
        )
        .change(
            Method::POST,
            "/runs/purge",
            RunsPurge,
            "runs",
            controls::purge_matching,
        )
        .read("/runs/{id}", get_run)
        .read("/runs/{id}/events", run_wait::events)
        .change(
            Method::POST,
            "/runs/{id}/cancel",
            RunCancel,
            "run",
            controls::cancel_run,
        )
        .change(
            Method::POST,
            "/runs/{id}/retry",
            RunRetry,
            "run",
            controls::retry_run,
        )
        .change(
            Method::POST,
            "/runs/{id}/signals/{name}",
            RunSignal,
            "run",
            signals::send,
        )
        .read("/runs/{id}/attempts/{seq}/calls", journals::calls)
        .read("/runs/{id}/attempts/{seq}/journal", journals::export)
        .read("/pauses", controls::list_pauses)
        .change(
            Method::POST,
            "/pauses/{scope}/{name}",
            Pause,
            "",
            controls::pause,
        )
        .change(
            Method::DELETE,
            "/pauses/{scope}/{name}",
            Resume,
            "",
            controls::resume,
        )
        .read("/overview", dashboard::overview)
        .read("/jobs/{name}/stats", dashboard::job_stats)
        .read("/stream", dashboard::stream)
        .read("/reports", list_reports)
        .read("/failures", failures::by_code)
        .read("/deliveries", deliveries::list)
        .read("/deliveries/{id}", deliveries::show)
        .change(
            Method::POST,
            "/deliveries/{id}/retry",
            DeliveryRetry,
            "delivery",
            deliveries::retry,
        )
        .change(
            Method::POST,
            "/events/{name}",
            EventEmit,
            "event",
            events::emit,
        )
        .read("/tenants", tenants::list)
        .change(Method::POST, "/tenants", TenantAdd, "tenant", tenants::add)
        .change(
            Method::POST,
            "/tenants/{name}/disable",
            TenantDisable,
            "tenant",
            tenants::disable,
        )
        .change(
            Method::POST,
            "/tenants/{name}/enable",
            TenantEnable,
            "tenant",
            tenants::enable,
        )
        .read("/tokens", tokens::list)
        .change(
            Method::POST,
            "/tokens",
            TokenCreate,
            "token",
            tokens::create,
        )
        .change(
            Method::DELETE,
            "/tokens/{id}",
            TokenRevoke,
            "token",
            tokens::revoke,
        )
        .read("/whoami", tokens::whoami)
        .read("/audit", audit::list)
        .read("/usage", usage::usage)
        .read("/hosts", hosts::list)
        .read("/upcoming", upcoming::list)
}

/// The console's files, served by the host itself: no fonts, scripts or styles from
/// anywhere else, which the content security policy enforces in the browser.
const CONSOLE: [(&str, &str, &str); 3] = [
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("console/console.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("console/charts.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
];

const CONSOLE_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
         connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-cache"),
];

async fn page() -> Response {
    (CONSOLE_HEADERS, Html(include_str!("console/index.html"))).into_response()
}

async fn console_file(ApiPath(file): ApiPath<String>) -> Response {
    match CONSOLE.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => (
            CONSOLE_HEADERS,
            [(header::CONTENT_TYPE, *content_type)],
            *body,
        )
            .into_response(),
        None => params::not_found().into_response(),
    }
}

/// The public keys of per-attempt tokens, for the services `links` calls.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "open", security(()),
    responses((status = 200, description = "A JSON Web Key Set (RFC 7517)", body = Object)))]
async fn jwks(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(s.app.links.signer().jwks())
}

#[utoipa::path(get, path = "/healthz", tag = "open", security(()),
    responses((status = 200, description = "The process answers: `ok`", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/readyz", tag = "open", security(()),
    responses(
        (status = 200, description = "`ready`: the database answers and the host is not draining", body = String, content_type = "text/plain"),
        (status = 503, description = "`draining` or `database unavailable`", body = String, content_type = "text/plain")))]
async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    if s.draining.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match s.app.store.now().await {
        Ok(_) => "ready".into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response(),
    }
}

/// `GET /jobs`.
#[derive(Serialize, utoipa::ToSchema)]
struct JobList {
    #[schema(value_type = Vec<views::JobView>)]
    jobs: Vec<Value>,
}

#[utoipa::path(get, path = "/jobs", tag = "jobs",
    responses((status = 200, description = "Every job the token sees", body = JobList)))]
async fn list_jobs(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<JobList>, ApiError> {
    let store = &s.app.store;
    let now = store.now().await?;
    let pauses = s.app.runner.pauses().current().await?;
    let mut jobs = store.list_jobs().await?;
    jobs.retain(|job| sees_job(&who, job));
    let jobs = views::job_views(
        &jobs,
        &store
            .instance_leases(crate::queue::kick::DEFAULT_INSTANCE)
            .await?,
        now,
    )
    .into_iter()
    .map(|mut view| {
        paused_view(&s, &pauses, &mut view);
        present(
            &who,
            serde_json::to_value(view).expect("a job's view serialises"),
        )
    })
    .collect();
    Ok(Json(JobList { jobs }))
}

/// Adds a job view's lane and the pauses that hold its runs (a tenant is told whether
/// its job is paused, not by whom: `pauses` names the operator's lanes and tenants).
fn paused_view(s: &Shared, pauses: &crate::queue::pause::PauseSet, view: &mut views::JobView) {
    let lane = s.catalog.lane_of(&view.name);
    let holding = pauses
        .holding(&view.name, &view.tenant, &lane)
        .into_iter()
        .map(|(scope, name)| views::PauseScope {
            scope: scope.as_str().to_string(),
            name,
        })
        .collect::<Vec<_>>();
    view.paused = Some(!holding.is_empty());
    view.pauses = Some(holding);
    view.lane = Some(lane);
}

#[utoipa::path(get, path = "/jobs/{name}", tag = "jobs",
    params(("name" = String, Path, description = "The job's name")),
    responses(
        (status = 200, description = "The job", body = views::JobView),
        (status = 404, description = "`unknown_job`", body = ErrorBody)))]
async fn get_job(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult {
    let job = visible_job(&s, &who, &name).await?;
    let now = s.app.store.now().await?;
    let lease = s.app.store.get_lease(&name, kick::DEFAULT_INSTANCE).await?;
    let pauses = s.app.runner.pauses().current().await?;
    let mut view = views::job_view(&job, lease.as_ref(), now);
    paused_view(&s, &pauses, &mut view);
    view.settings = Some(views::job_settings(&job.spec));
    let view = serde_json::to_value(view).expect("a job's view serialises");
    Ok(Json(present(&who, view)))
}

/// A page of runs, newest first; `next` is the `before` of the next page.
#[derive(Serialize, utoipa::ToSchema)]
struct RunsPage {
    #[schema(value_type = Vec<views::RunView>)]
    runs: Vec<Value>,
    limit: i64,
    next: Option<String>,
}

#[utoipa::path(get, path = "/runs", tag = "runs", params(RunsQuery),
    responses(
        (status = 200, description = "Runs the filter takes, newest first", body = RunsPage),
        (status = 400, description = "`invalid_parameter`, naming the field", body = ErrorBody)))]
async fn list_runs(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Json<RunsPage>, ApiError> {
    let filter = run_filter(&s, &who, q).await?;
    let limit = filter.limit;
    let runs = s.app.store.list_runs(&filter).await?;
    let next = (runs.len() as i64 == limit)
        .then(|| runs.last().map(|r| format!("{}_{}", r.created_at, r.id)))
        .flatten();
    Ok(Json(RunsPage {
        runs: runs.iter().map(|r| present(&who, views::run(r))).collect(),
        limit,
        next,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct RunQuery {
    /// Wait up to this long for the run to end (`30s`; at most `60s`).
    wait: Option<String>,
}

/// `GET /runs/{id}`: a run in detail, with what holds it and what was done to it.
#[derive(Serialize, utoipa::ToSchema)]
struct RunAnswer {
    #[serde(flatten)]
    detail: views::RunDetail,
    /// Kicks folded into it while it holds its lease (0 or 1).
    kicks_pending: i64,
    /// What keeps a queued run waiting (a pause, a quota, a limit), if anything.
    held_by: Option<String>,
    #[schema(value_type = Vec<views::FileView>)]
    files: Vec<Value>,
    /// Its attempts' kept journals: `seq`, `calls`, `bytes`, `replayable`, `recorded_at`.
    #[schema(value_type = Vec<Object>)]
    journals: Vec<crate::store::JournalRecord>,
    #[schema(value_type = Vec<views::RunActionView>)]
    actions: Vec<Value>,
    /// Its trace in the operator's tracing UI (`--trace-url`).
    trace_url: Option<String>,
    /// Its ending's deliveries to webhooks (operators' tokens only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<views::DeliveryView>>, required = false)]
    deliveries: Option<Vec<Value>>,
}

/// A run in detail; with `wait`, once it ended or the wait is over.
#[utoipa::path(get, path = "/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run's id"), RunQuery),
    responses(
        (status = 200, description = "The run (with `wait`: once it ended, or its state when the wait is over)", body = RunAnswer),
        (status = 400, description = "`invalid_parameter`: a `wait` that is not a duration of at most 60s", body = ErrorBody),
        (status = 404, description = "`unknown_run`, also another tenant's", body = ErrorBody),
        (status = 503, description = "`too_many_waiters`: the host waits for 10 000 runs already", body = ErrorBody)))]
async fn get_run(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<RunQuery>,
) -> Result<Json<Value>, ApiError> {
    let wait = run_wait::wait_of(q.wait.as_deref())?;
    let mut run = visible::visible_run(&s, &who, &id).await?;
    if let Some(wait) = wait {
        run_wait::until_ended(&s, &id, &run.status, wait).await?;
        run = visible::visible_run(&s, &who, &id).await?;
    }
    let attempts = s
        .app
        .store
        .list_attempts(&id, views::ATTEMPTS_SHOWN)
        .await?;
    let live = s.app.store.live_log(&id).await?;
    let steps = s.app.store.run_steps(&id).await?;
    let failed_steps = s.app.store.run_step_failures(&id).await?;
    let files = s.app.store.run_files(&id, views::FILES_SHOWN).await?;
    let journals = s.app.store.run_journals(&id).await?;
    let lease = s.app.store.get_lease(&run.job, &run.instance).await?;
    let pauses = s.app.runner.pauses().current().await?;
    let over_quota = s
        .app
        .runner
        .quotas()
        .over(crate::queue::quota::OverQuota::Wait)
        .await?;
    let held_by =
        crate::queue::waits::why_waiting(&s.app.store, &pauses, &over_quota, &run).await?;
    let detail = views::run_detail_view(&run, &attempts, live.as_ref(), &steps, &failed_steps);
    let actions = s
        .app
        .store
        .list_audit(&crate::store::AuditFilter {
            run_id: Some(id.clone()),
            limit: views::ACTIONS_SHOWN,
            ..Default::default()
        })
        .await?;
    let deliveries = match who.tenant() {
        // The operator's webhooks' deliveries of its ending: none for a tenant's token.
        Some(_) => None,
        None => {
            let deliveries = s
                .app
                .store
                .list_deliveries(&crate::store::DeliveryFilter {
                    run_id: Some(&id),
                    limit: views::MAX_PAGE,
                    ..Default::default()
                })
                .await?;
            Some(deliveries.iter().map(views::delivery).collect())
        }
    };
    let trace_url = s
        .trace_url
        .as_ref()
        .map(|template| template.replace("{trace_id}", &detail.run.trace_id));
    let answer = RunAnswer {
        kicks_pending: views::kicks_pending(&run, lease.as_ref()),
        held_by,
        files: files.iter().map(views::file).collect(),
        journals,
        actions: actions
            .iter()
            .map(|a| views::run_action(a, who.tenant().is_some()))
            .collect(),
        trace_url,
        deliveries,
        detail,
    };
    let answer = serde_json::to_value(answer).expect("a run's answer serialises");
    Ok(Json(present(&who, answer)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ReportsQuery {
    /// Only this job's.
    job: Option<String>,
    limit: Option<i64>,
}

/// `GET /reports`.
#[derive(Serialize, utoipa::ToSchema)]
struct ReportList {
    /// Each a report as its sinks get it: `kind` (`crashed`, `missed`, `failed`), the job,
    /// the run and what happened.
    #[schema(value_type = Vec<Object>)]
    reports: Vec<Value>,
}

#[utoipa::path(get, path = "/reports", tag = "runs", params(ReportsQuery),
    responses(
        (status = 200, description = "Crashed, missed and failed reports, newest first", body = ReportList),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
async fn list_reports(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<ReportsQuery>,
) -> Result<Json<ReportList>, ApiError> {
    let job = params::job_filter(q.job)?;
    let limit = views::page_size(q.limit);
    let reports = s
        .app
        .store
        .list_reports(job.as_deref(), who.tenant(), limit)
        .await?;
    let reports: Vec<Value> = reports
        .iter()
        .map(crate::service::report::payload)
        .collect();
    Ok(Json(ReportList { reports }))
}
