//! `GET /runs/search?payload={...}`: the newest runs whose payload contains a JSON object,
//! bounded in rows (the page size), time (`store::SEARCH_BOUND`, then 503
//! `search_timeout`) and, on SQLite, the runs read (`complete` says if all were).
//! A tenant's token searches its own runs only.

use super::error::{ApiError, ApiResult};
use super::params::{self, ApiQuery};
use super::state::Shared;
use super::visible::present;
use crate::rules::payload_match;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::StoreError;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

#[derive(Deserialize)]
pub(super) struct SearchQuery {
    payload: Option<String>,
    job: Option<String>,
    tenant: Option<String>,
    limit: Option<i64>,
}

pub(super) async fn search(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> ApiResult {
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
                format!(
                    "the search ran past {} s: narrow it by job or tenant, or search for more of the payload",
                    crate::store::SEARCH_BOUND.as_secs()
                ),
            ),
            other => other.into(),
        })?;
    Ok(Json(json!({
        "runs": found.runs.iter().map(|r| present(&who, views::run(r))).collect::<Vec<_>>(),
        "limit": limit,
        "complete": found.complete,
        "scan_limit": crate::store::SCAN_ROWS,
    })))
}
