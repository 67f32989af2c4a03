//! `GET /runs/search?payload={...}`: the newest runs whose payload contains a JSON object,
//! bounded in rows (the page size), time (`store::payload_search::SEARCH_BOUND`, then 503
//! `search_timeout`) and, on SQLite, the runs read (`complete` says if all were).
//! A tenant's token searches its own runs only.

use super::error::{ApiError, ErrorBody};
use super::params::{self, ApiQuery};
use super::state::Shared;
use super::visible::present;
use crate::rules::payload_match;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::StoreError;
use crate::store::payload_search::{SCAN_ROWS, SEARCH_BOUND};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct SearchQuery {
    /// A JSON object the payload must contain.
    payload: Option<String>,
    /// Only this job's.
    job: Option<String>,
    /// Only this tenant's (an operator's token; a tenant's searches its own).
    tenant: Option<String>,
    limit: Option<i64>,
}

/// The newest runs whose payload contains the object.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct SearchPage {
    #[schema(value_type = Vec<views::RunView>)]
    runs: Vec<Value>,
    limit: i64,
    /// Every run the other filters match was read (SQLite reads at most `scan_limit`).
    complete: bool,
    scan_limit: i64,
}

#[utoipa::path(get, path = "/runs/search", tag = "runs", params(SearchQuery),
    responses(
        (status = 200, description = "The newest runs whose payload contains the object", body = SearchPage),
        (status = 400, description = "`invalid_parameter`: no payload, or not a JSON object", body = ErrorBody),
        (status = 503, description = "`search_timeout`: the search ran past its bound", body = ErrorBody)))]
pub(super) async fn search(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<SearchPage>, ApiError> {
    let needle = payload_match::needle(q.payload.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let job = params::job_filter(q.job)?;
    let tenant = match (who.tenant(), q.tenant) {
        (Some(own), _) => Some(own.to_string()),
        (None, Some(t)) if !params::is_tenant_name(&t) => {
            return Err(ApiError::invalid("tenant: use a tenant name"));
        }
        (None, asked) => asked,
    };
    let limit = views::page_size(q.limit);
    let found = s
        .app
        .store
        .search_payloads(&needle, job.as_deref(), tenant.as_deref(), limit)
        .await
        .map_err(|e| match e {
            StoreError::TimedOut => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "search_timeout",
                payload_match::timed_out(SEARCH_BOUND),
            ),
            other => other.into(),
        })?;
    Ok(Json(SearchPage {
        runs: found
            .runs
            .iter()
            .map(|r| present(&who, views::run(r)))
            .collect(),
        limit,
        complete: found.complete,
        scan_limit: SCAN_ROWS,
    }))
}
