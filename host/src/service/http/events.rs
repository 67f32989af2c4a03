//! `POST /events/{name}` `{"key", "payload", "tenant"}`: queues a run of each subscriber
//! (`crate::queue::events`). A tenant's token emits its own tenant's events only.

use super::error::{ApiError, ErrorBody};
use super::params::{self, ApiPath};
use super::params::{json_body, trace_of};
use super::state::Shared;
use super::state::refuse_if_draining;
use crate::queue::events::{self, EmitError};
use crate::rules::tenant::Principal;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EmitBody {
    /// The event's key: the same event and key again queues nothing more.
    key: String,
    /// Any JSON: each subscriber's run's payload.
    #[schema(value_type = Option<serde_json::Value>)]
    payload: Option<Box<serde_json::value::RawValue>>,
    /// Only this tenant's subscribers (a tenant's token: its own, always).
    tenant: Option<String>,
}

/// The runs an event queued, or queued before for the same key (`duplicate`).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Emitted {
    event: String,
    key: String,
    runs: Vec<crate::queue::events::EventRun>,
}

#[utoipa::path(post, path = "/events/{name}", tag = "events",
    params(("name" = String, Path, description = "The event's name, e.g. `invoice.created`"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context to join")),
    request_body = EmitBody,
    responses(
        (status = 202, description = "A run of each subscriber, once per key", body = Emitted),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody)))]
pub(super) async fn emit(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Emitted>), ApiError> {
    refuse_if_draining(&s, "emit on another")?;
    let body: EmitBody = json_body(
        &body,
        "the body must be a JSON object with `key`, and optionally `payload` and `tenant`",
    )?;
    if body
        .tenant
        .as_deref()
        .is_some_and(|t| !params::is_tenant_name(t))
    {
        return Err(ApiError::invalid("tenant: use a tenant's name"));
    }
    let tenant = match (&who, body.tenant) {
        (Principal::Operator, tenant) => tenant,
        (Principal::Tenant(own), None) => Some(own.clone()),
        (Principal::Tenant(own), Some(asked)) if &asked == own => Some(asked),
        (Principal::Tenant(_), Some(_)) => {
            return Err(ApiError::invalid(
                "a tenant emits its own events: leave out `tenant`",
            ));
        }
    };
    let payload = body.payload.as_ref().map(|p| p.get());
    let trace = trace_of(&headers);
    match events::emit(
        &s.app.store,
        &name,
        &body.key,
        tenant.as_deref(),
        payload,
        trace,
    )
    .await
    {
        Ok(runs) => {
            if runs.iter().any(|r| !r.duplicate) {
                s.app.wake.notify_one();
            }
            Ok((
                StatusCode::ACCEPTED,
                Json(Emitted {
                    event: name,
                    key: body.key,
                    runs,
                }),
            ))
        }
        Err(EmitError::Store(e)) => Err(e.into()),
        Err(e) => Err(ApiError::invalid(e.to_string())),
    }
}
