//! Delivered endings over HTTP: `GET /deliveries` (by run, by state, newest first),
//! `GET /deliveries/{id}` with its attempts, and `POST /deliveries/{id}/retry` of one
//! given up. Deliveries go to the operator's webhooks, so they are the operator's: for a
//! tenant's token they do not exist.

use super::error::{ApiError, ApiResult};
use super::params::{self, ApiPath, ApiQuery};
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::{DeliveryFilter, DeliveryState};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Attempts a delivery's view shows, the newest.
pub const ATTEMPTS_SHOWN: i64 = 50;

fn operator_only(who: &Principal) -> Result<(), ApiError> {
    match who {
        Principal::Operator => Ok(()),
        Principal::Tenant(_) => Err(params::not_found()),
    }
}

#[derive(Deserialize)]
pub(super) struct DeliveriesQuery {
    run: Option<String>,
    status: Option<String>,
    limit: Option<i64>,
    /// The `next` of the page before.
    before: Option<i64>,
}

/// A `status=` filter: a delivery's state, or 400 naming the field.
fn state_filter(status: Option<&str>) -> Result<Option<DeliveryState>, String> {
    status
        .map(|s| {
            DeliveryState::parse(s)
                .ok_or_else(|| "status: use pending, delivered or failed (given up)".to_string())
        })
        .transpose()
}

pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<DeliveriesQuery>,
) -> ApiResult {
    operator_only(&who)?;
    if let Some(run) = &q.run
        && !params::is_run_id(run)
    {
        return Err(ApiError::invalid("run: not a run id"));
    }
    let state = state_filter(q.status.as_deref()).map_err(ApiError::invalid)?;
    let limit = views::page_size(q.limit);
    let found = s
        .app
        .store
        .list_deliveries(&DeliveryFilter {
            run_id: q.run.as_deref(),
            state,
            tenant: None,
            before: q.before,
            limit,
        })
        .await?;
    let next = (found.len() as i64 == limit)
        .then(|| found.last().map(|d| d.id))
        .flatten();
    Ok(Json(json!({
        "deliveries": found.iter().map(views::delivery).collect::<Vec<Value>>(),
        "limit": limit,
        "next": next,
    })))
}

pub(super) async fn show(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult {
    operator_only(&who)?;
    let delivery = s
        .app
        .store
        .get_delivery(id)
        .await?
        .ok_or_else(unknown_delivery)?;
    let attempts = s.app.store.delivery_attempts(id, ATTEMPTS_SHOWN).await?;
    let mut view = views::delivery(&delivery);
    view["attempt_records"] = attempts.iter().map(views::delivery_attempt).collect();
    Ok(Json(view))
}

pub(super) async fn retry(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult {
    operator_only(&who)?;
    if let Some(retried) = s.app.store.retry_delivery(id).await? {
        tracing::info!(delivery_id = id, run_id = %retried.run_id, webhook = %retried.webhook, "delivery retried by the operator");
        return Ok(Json(views::delivery(&retried)));
    }
    match s.app.store.get_delivery(id).await? {
        None => Err(unknown_delivery()),
        Some(d) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_retryable",
            format!(
                "delivery {id} is {}: only a delivery given up (failed) is retried",
                d.state
            ),
        )),
    }
}

fn unknown_delivery() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_delivery",
        "no such delivery",
    )
}
