//! `/usage`: what each tenant's attempts used in the last hour, against its quota. An
//! operator sees every tenant; a tenant's token sees only its own.

use super::error::ApiResult;
use super::state::Shared;
use crate::queue::quota::{OverQuota, Quotas, WINDOW};
use crate::rules::tenant::Principal;
use crate::store::TenantUsage;
use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) async fn usage(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> ApiResult {
    let book = s.app.runner.quotas();
    let usage = book.usage().await?;
    let tenants: Vec<Value> = usage
        .values()
        .filter(|u| who.sees(&u.tenant))
        .map(|u| view(u, book.quotas()))
        .collect();
    Ok(Json(json!({
        "window_seconds": WINDOW.as_secs(),
        "tenants": tenants,
    })))
}

fn view(usage: &TenantUsage, quotas: &Quotas) -> Value {
    let quota = quotas.of(&usage.tenant);
    json!({
        "tenant": usage.tenant,
        "fuel_used": usage.fuel_used,
        "wall_ms": usage.wall_ms,
        "attempts": usage.attempts,
        "quota": quota.map(|q| json!({
            "fuel_per_hour": q.fuel_per_hour,
            "time_per_hour_ms": q.time_per_hour.map(|t| t.as_millis() as u64),
            "over_quota": match q.over_quota {
                OverQuota::Wait => "wait",
                OverQuota::Fail => "fail",
            },
        })),
        "over": quotas.exceeded_by(usage).is_some(),
    })
}
