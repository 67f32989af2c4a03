//! `GET /failures?window=hour|day|week`: failed and crashed runs over time by code, in the
//! overview's buckets — the codes with most failures each a series of its own, the rest
//! summed as `other`, so the chart stays readable. A tenant's token: its own runs.

use super::dashboard::{WindowQuery, bucket_rows, window};
use super::error::{ApiError, ErrorBody};
use super::params::ApiQuery;
use super::state::Shared;
use crate::rules::tenant::Principal;
use axum::Json;
use axum::extract::{Extension, State};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// Codes drawn as series of their own.
const CODES_SHOWN: usize = 6;
/// The series the other codes are summed into (no failure code is named so).
const OTHER: &str = "other";
/// A failure with no code recorded.
const NO_CODE: &str = "no_code";

/// Failures in a window by code.
#[derive(Serialize, ToSchema)]
pub(super) struct FailuresByCode {
    /// `hour`, `day` or `week`.
    window: &'static str,
    bucket_ms: i64,
    /// The series, most failures first; `other` last when more codes failed.
    codes: Vec<String>,
    /// Every code's failures in the window, most first.
    totals: Vec<CodeCount>,
    /// `{"t": time, <series>: count, ...}` each, in time order.
    #[schema(value_type = Vec<Object>)]
    buckets: Vec<Value>,
}

/// A code's failures (`no_code`: none recorded).
#[derive(Serialize, ToSchema)]
pub(super) struct CodeCount {
    code: String,
    count: i64,
}

#[utoipa::path(get, path = "/failures", tag = "console", params(WindowQuery),
    responses(
        (status = 200, description = "Failed and crashed runs over time, by code", body = FailuresByCode),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn by_code(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<WindowQuery>,
) -> Result<Json<FailuresByCode>, ApiError> {
    let (name, length, bucket) = window(q.window.as_deref())?;
    let store = &s.app.store;
    let now = store.now().await?;
    let since = now - length;
    let rows = store
        .failures_by_bucket(since, bucket, who.tenant())
        .await?;
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for (_, code, n) in &rows {
        let code = if code.is_empty() { NO_CODE } else { code };
        *totals.entry(code.to_string()).or_default() += n;
    }
    let mut codes: Vec<(String, i64)> = totals.into_iter().collect();
    codes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut shown: Vec<String> = codes
        .iter()
        .take(CODES_SHOWN)
        .map(|c| c.0.clone())
        .collect();
    if codes.len() > CODES_SHOWN {
        shown.push(OTHER.to_string());
    }
    let series = |code: &str| -> String {
        let code = if code.is_empty() { NO_CODE } else { code };
        match shown.iter().any(|c| c == code) {
            true => code.to_string(),
            false => OTHER.to_string(),
        }
    };
    let mut buckets: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
    let mut t = since / bucket * bucket;
    while t <= now {
        buckets.insert(t, shown.iter().map(|c| (c.clone(), 0)).collect());
        t += bucket;
    }
    for (t, code, n) in &rows {
        if let Some(counts) = buckets.get_mut(t) {
            *counts.entry(series(code)).or_default() += n;
        }
    }
    Ok(Json(FailuresByCode {
        window: name,
        bucket_ms: bucket,
        codes: shown,
        totals: codes
            .into_iter()
            .map(|(code, count)| CodeCount { code, count })
            .collect(),
        buckets: bucket_rows(buckets),
    }))
}
