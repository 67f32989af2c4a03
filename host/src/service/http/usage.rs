//! `/usage`: what each tenant's attempts used in the last hour, against its quota. An
//! operator sees every tenant; a tenant's token sees only its own.

use super::error::ApiError;
use super::state::Shared;
use crate::queue::quota::{OverQuota, Quotas, WINDOW};
use crate::rules::tenant::Principal;
use crate::store::TenantUsage;
use axum::Json;
use axum::extract::{Extension, State};
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// `GET /usage`: each tenant's use of the window.
#[derive(Serialize, ToSchema)]
pub(super) struct Usage {
    window_seconds: u64,
    tenants: Vec<TenantUse>,
}

/// What a tenant's attempts that ended in the window used, against its quota.
#[derive(Serialize, ToSchema)]
pub(super) struct TenantUse {
    tenant: String,
    fuel_used: i64,
    wall_ms: i64,
    attempts: i64,
    quota: Option<QuotaView>,
    /// Over its quota: its runs wait or fail by `over_quota`.
    over: bool,
}

#[derive(Serialize, ToSchema)]
pub(super) struct QuotaView {
    fuel_per_hour: Option<u64>,
    time_per_hour_ms: Option<u64>,
    /// `wait` or `fail`.
    over_quota: &'static str,
}

#[utoipa::path(get, path = "/usage", tag = "tenants",
    responses((status = 200, description = "Each tenant's use of the last hour (a tenant's token: its own)", body = Usage)))]
pub(super) async fn usage(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<Usage>, ApiError> {
    let book = s.app.runner.quotas();
    let usage = book.usage().await?;
    let tenants = usage
        .values()
        .filter(|u| who.sees(&u.tenant))
        .map(|u| view(u, book.quotas()))
        .collect();
    Ok(Json(Usage {
        window_seconds: WINDOW.as_secs(),
        tenants,
    }))
}

fn view(usage: &TenantUsage, quotas: &Quotas) -> TenantUse {
    let quota = quotas.of(&usage.tenant);
    TenantUse {
        tenant: usage.tenant.clone(),
        fuel_used: usage.fuel_used,
        wall_ms: usage.wall_ms,
        attempts: usage.attempts,
        quota: quota.map(|q| QuotaView {
            fuel_per_hour: q.fuel_per_hour,
            time_per_hour_ms: q.time_per_hour.map(|t| t.as_millis() as u64),
            over_quota: match q.over_quota {
                OverQuota::Wait => "wait",
                OverQuota::Fail => "fail",
            },
        }),
        over: quotas.exceeded_by(usage).is_some(),
    }
}
