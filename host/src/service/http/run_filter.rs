//! The run filter as the API takes it (`GET /runs`, `/runs/count`, and actions by
//! filter): every part checked, and narrowed to what the caller may see, before any query.

use super::error::ApiError;
use super::params;
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::{RunFilter, RunStatus};
use serde::Deserialize;

/// A run filter as the API takes it: the query string of `GET /runs` and `/runs/count`,
/// and the `filter` of an action by filter.
#[derive(Deserialize, Default, utoipa::ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct RunsQuery {
    pub(super) job: Option<String>,
    /// A run's status (a tenant's token: a status it is told, `dropped` for `skipped`).
    pub(super) status: Option<String>,
    /// A failure code.
    pub(super) code: Option<String>,
    /// The operator's only: a tenant's token sees its own runs.
    pub(super) tenant: Option<String>,
    pub(super) instance: Option<String>,
    /// Text the last error contains, in any case.
    pub(super) q: Option<String>,
    /// RFC 3339 time, or a duration back from now (`1h`).
    pub(super) since: Option<String>,
    pub(super) until: Option<String>,
    pub(super) limit: Option<i64>,
    /// The `next` token of the previous page.
    pub(super) before: Option<String>,
}

/// Longest text `q` searches the last errors for.
const MAX_SEARCH: usize = 200;

pub(super) fn parse_time(text: &str, now: i64, field: &str) -> Result<i64, ApiError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    crate::rules::units::parse_duration(text)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .and_then(|back| now.checked_sub(back))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{field}: use an RFC 3339 time or a duration such as 1h"
            ))
        })
}

/// The statuses a status filter stands for: a run status for the operator, one of the
/// statuses a tenant is told for a tenant.
pub(super) fn statuses(who: &Principal, text: &str) -> Result<Vec<RunStatus>, ApiError> {
    let found = match who {
        Principal::Operator => RunStatus::parse(text).map(|s| vec![s]),
        Principal::Tenant(_) => views::tenant_statuses(text),
    };
    found.ok_or_else(|| ApiError::invalid(format!("unknown status {text:?}")))
}

/// The filter `q` stands for, as `who` may use it: every part checked before any query.
pub(super) async fn run_filter(
    s: &Shared,
    who: &Principal,
    q: RunsQuery,
) -> Result<RunFilter, ApiError> {
    let job = params::job_filter(q.job)?;
    let now = s.app.store.now().await?;
    let statuses = match q.status.as_deref() {
        Some(text) => statuses(who, text)?,
        None => Vec::new(),
    };
    let code = q
        .code
        .map(
            |code| match crate::rules::failure::FailureCode::parse(&code) {
                Some(known) => Ok(known.as_str().to_string()),
                None => Err(ApiError::invalid(format!(
                    "code: {code:?} is not a failure code (`host codes` lists them)"
                ))),
            },
        )
        .transpose()?;
    let tenant = match who.tenant() {
        Some(own) => Some(own.to_string()),
        None => q
            .tenant
            .map(|t| match params::is_tenant_name(&t) {
                true => Ok(t),
                false => Err(ApiError::invalid("tenant: use a tenant name")),
            })
            .transpose()?,
    };
    let instance = q
        .instance
        .map(|i| {
            crate::rules::job::validate_instance(&i)
                .map(|()| i)
                .map_err(|e| ApiError::invalid(e.to_string()))
        })
        .transpose()?;
    let error_text =
        q.q.filter(|text| !text.is_empty())
            .map(
                |text| match text.chars().count() <= MAX_SEARCH && !text.contains('\0') {
                    true => Ok(text),
                    false => Err(ApiError::invalid(format!(
                        "q: search for at most {MAX_SEARCH} characters of text"
                    ))),
                },
            )
            .transpose()?;
    let before = q
        .before
        .as_deref()
        .map(|token| {
            token
                .split_once('_')
                .filter(|(_, id)| params::is_run_id(id))
                .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_string())))
                .ok_or_else(|| {
                    ApiError::invalid("before: use the `next` token of the previous page")
                })
        })
        .transpose()?;
    Ok(RunFilter {
        job,
        statuses,
        tenant,
        since: q
            .since
            .as_deref()
            .map(|t| parse_time(t, now, "since"))
            .transpose()?,
        until: q
            .until
            .as_deref()
            .map(|t| parse_time(t, now, "until"))
            .transpose()?,
        code,
        instance,
        error_text,
        unretried: false,
        before,
        limit: views::page_size(q.limit),
    })
}
