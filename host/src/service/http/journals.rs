//! An attempt's journal through the API: its timeline of host calls (for the page) and
//! the journal itself (the export `host replay --from` reads). A journal is its run's
//! tenant's: another tenant's token gets 404, as for the run.

use super::error::{ApiError, ApiResult};
use super::params::{ApiPath, is_run_id};
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::sandbox::journal::file::JournalFile;
use crate::store::JournalRecord;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Most calls a timeline lists; the rest are counted.
pub const TIMELINE_CALLS: usize = 2000;

/// `GET /runs/{id}/attempts/{seq}/calls`: the host calls in order, each with its short
/// arguments, duration and result code (never what it answered).
#[utoipa::path(get, path = "/runs/{id}/attempts/{seq}/calls", tag = "runs",
    params(("id" = String, Path, description = "The run's id"),
        ("seq" = i64, Path, description = "The attempt's number, from 1")),
    responses(
        (status = 200, description = "The attempt's host calls in order (the first 2 000): import, short arguments, start, duration, result code", body = Object),
        (status = 404, description = "`unknown_journal`", body = super::error::ErrorBody),
        (status = 500, description = "`unreadable_journal`: written by a host version this one cannot read", body = super::error::ErrorBody)))]
pub(super) async fn calls(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath((id, seq)): ApiPath<(String, i64)>,
) -> ApiResult {
    let record = visible(&s, &who, &id, seq).await?;
    // The host wrote it; one it cannot read is reported, not shown.
    let journal = JournalFile::parse(record.body.as_bytes()).map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unreadable_journal",
            "the journal cannot be read by this host version",
        )
    })?;
    Ok(Json(crate::sandbox::journal::timeline(
        &journal,
        record.recorded_at,
        TIMELINE_CALLS,
    )))
}

/// `GET /runs/{id}/attempts/{seq}/journal`: the journal as `host runs export` prints it,
/// as a download.
#[utoipa::path(get, path = "/runs/{id}/attempts/{seq}/journal", tag = "runs",
    params(("id" = String, Path, description = "The run's id"),
        ("seq" = i64, Path, description = "The attempt's number, from 1")),
    responses(
        (status = 200, description = "The journal, as `host runs export` prints it and `host replay --from` reads it", body = Object),
        (status = 404, description = "`unknown_journal`", body = super::error::ErrorBody)))]
pub(super) async fn export(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath((id, seq)): ApiPath<(String, i64)>,
) -> Result<Response, ApiError> {
    let record = visible(&s, &who, &id, seq).await?;
    let name = format!(
        "attachment; filename=\"{}-{}.journal\"",
        record.run_id, record.seq
    );
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        record.body,
    )
        .into_response())
}

/// The journal of attempt `seq` of run `id`, if it exists and `who` may see it.
async fn visible(
    s: &Shared,
    who: &Principal,
    id: &str,
    seq: i64,
) -> Result<JournalRecord, ApiError> {
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_journal",
            format!("no journal of attempt {seq} of run {id:?}"),
        )
    };
    if !is_run_id(id) || seq < 1 {
        return Err(unknown());
    }
    let record = s.app.store.journal(id, Some(seq)).await?;
    record.filter(|r| who.sees(&r.tenant)).ok_or_else(unknown)
}
