//! Delivered endings over HTTP: `GET /deliveries` (by run, by state, newest first),
//! `GET /deliveries/{id}` with its attempts, and `POST /deliveries/{id}/retry` of one
//! given up. Deliveries go to the operator's webhooks, so they are the operator's: for a
//! tenant's token they do not exist.

use super::error::{ApiError, ErrorBody};
use super::params::{self, ApiPath, ApiQuery};
use super::state::Shared;
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::{DeliveryFilter, DeliveryState};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// Attempts a delivery's view shows, the newest.
pub const ATTEMPTS_SHOWN: i64 = 50;

fn operator_only(who: &Principal) -> Result<(), ApiError> {
    match who {
        Principal::Operator => Ok(()),
        Principal::Tenant(_) => Err(params::not_found()),
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeliveriesQuery {
    /// Only this run's.
    run: Option<String>,
    /// `pending`, `delivered` or `failed` (given up).
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

/// A page of deliveries, newest first; `next` is the `before` of the next page.
#[derive(Serialize, ToSchema)]
pub(super) struct DeliveryPage {
    #[schema(value_type = Vec<views::DeliveryView>)]
    deliveries: Vec<Value>,
    limit: i64,
    next: Option<i64>,
}

#[utoipa::path(get, path = "/deliveries", tag = "deliveries", params(DeliveriesQuery),
    responses(
        (status = 200, description = "Deliveries of endings to webhooks, newest first", body = DeliveryPage),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
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
    Ok(Json(DeliveryPage {
        deliveries: found.iter().map(views::delivery).collect(),
        limit,
        next,
    }))
}

/// A delivery with its newest attempts.
#[derive(Serialize, ToSchema)]
pub(super) struct DeliveryDetail {
    #[serde(flatten)]
    #[schema(inline, value_type = views::DeliveryView)]
    delivery: Value,
    #[schema(value_type = Vec<views::DeliveryAttemptView>)]
    attempt_records: Vec<Value>,
}

#[utoipa::path(get, path = "/deliveries/{id}", tag = "deliveries",
    params(("id" = i64, Path, description = "The delivery's id")),
    responses(
        (status = 200, description = "The delivery and its last 50 attempts", body = DeliveryDetail),
        (status = 404, description = "`unknown_delivery`; `not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn show(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<DeliveryDetail>, ApiError> {
    operator_only(&who)?;
    let delivery = s
        .app
        .store
        .get_delivery(id)
        .await?
        .ok_or_else(unknown_delivery)?;
    let attempts = s.app.store.delivery_attempts(id, ATTEMPTS_SHOWN).await?;
    Ok(Json(DeliveryDetail {
        delivery: views::delivery(&delivery),
        attempt_records: attempts.iter().map(views::delivery_attempt).collect(),
    }))
}

#[utoipa::path(post, path = "/deliveries/{id}/retry", tag = "deliveries",
    params(("id" = i64, Path, description = "The delivery's id")),
    responses(
        (status = 200, description = "Pending again, with a new retry window", body = views::DeliveryView),
        (status = 404, description = "`unknown_delivery`; `not_found`: a tenant's token", body = ErrorBody),
        (status = 409, description = "`not_retryable`: not given up", body = ErrorBody)))]
pub(super) async fn retry(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Value>, ApiError> {
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
