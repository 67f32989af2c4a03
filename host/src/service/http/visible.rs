//! What a caller sees: a tenant's token sees its own jobs and runs (and per-tenant jobs),
//! through `views::for_tenant`; what belongs to another tenant answers 404, as if it did
//! not exist.

use super::error::ApiError;
use super::params;
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::JobRecord;
use axum::http::StatusCode;
use serde_json::Value;

/// What only an operator's token may see or do (pauses, tenants, tokens, hosts, purges):
/// to a tenant's token it does not exist.
pub(super) fn operator_only(who: &Principal) -> Result<(), ApiError> {
    match who {
        Principal::Operator => Ok(()),
        Principal::Tenant(_) => Err(params::not_found()),
    }
}

/// A view as `who` may see it.
pub(super) fn present(who: &Principal, view: Value) -> Value {
    match who {
        Principal::Operator => view,
        Principal::Tenant(_) => views::for_tenant(view),
    }
}

/// The job, if it exists and `who` may see it; another tenant's job does not exist, nor
/// does one whose name breaks the job name rule (it is never looked up).
/// Every tenant sees a per-tenant job (and, through the run filter, only its own children).
pub(super) async fn visible_job(
    s: &Shared,
    who: &Principal,
    name: &str,
) -> Result<JobRecord, ApiError> {
    if params::is_job_name(name)
        && let Some(job) = s.app.store.get_job(name).await?
        && sees_job(who, &job)
    {
        return Ok(job);
    }
    Err(unknown_job(s, who, name).await)
}

/// Whether `who` sees `job`: its own, or a per-tenant job (one child of which is its own).
pub(super) fn sees_job(who: &Principal, job: &JobRecord) -> bool {
    job.per_tenant != 0 || who.sees(&job.tenant)
}

/// 404 `unknown_job`, naming the jobs `who` sees (a bounded list), so a typo shows at once;
/// another tenant's job is never named.
pub(super) async fn unknown_job(s: &Shared, who: &Principal, name: &str) -> ApiError {
    match s.app.store.list_jobs().await {
        Ok(jobs) => {
            let known = jobs.iter().filter(|job| sees_job(who, job));
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_job",
                format!(
                    "no job named {name:?}; {}",
                    crate::rules::job::known_jobs(known.map(|job| job.name.as_str()))
                ),
            )
        }
        Err(e) => e.into(),
    }
}

/// The run `id` as `who` may see it, read now; another tenant's run answers 404 as an
/// unknown one.
pub(super) async fn visible_run(
    s: &Shared,
    who: &Principal,
    id: &str,
) -> Result<crate::store::RunRecord, ApiError> {
    let run = if params::is_run_id(id) {
        s.app.store.get_run(id).await?
    } else {
        None
    };
    run.filter(|r| who.sees(&r.tenant)).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no run with id {id:?}"),
        )
    })
}
