//! `/tenants`: the registry, for operators only. To a tenant's token these paths do not
//! exist (404 `not_found`), like anything else that is not its own.

use super::audit::AuditNote;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::params::{self, ApiPath};
use super::state::Shared;
use super::visible::operator_only;
use crate::rules::tenant::{self, Principal};
use crate::service::views;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// `GET /tenants`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct TenantList {
    #[schema(value_type = Vec<views::TenantView>)]
    tenants: Vec<Value>,
}

#[utoipa::path(get, path = "/tenants", tag = "tenants",
    responses(
        (status = 200, description = "The registry", body = TenantList),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<TenantList>, ApiError> {
    operator_only(&who)?;
    let tenants: Vec<Value> = s
        .app
        .store
        .list_tenants()
        .await?
        .iter()
        .map(views::tenant)
        .collect();
    Ok(Json(TenantList { tenants }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewTenant {
    name: String,
}

#[utoipa::path(post, path = "/tenants", tag = "tenants", request_body = NewTenant,
    responses(
        (status = 201, description = "Registered", body = views::TenantView),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody),
        (status = 409, description = "`tenant_exists`", body = ErrorBody)))]
pub(super) async fn add(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Extension<AuditNote>, Json<Value>), ApiError> {
    operator_only(&who)?;
    let NewTenant { name } = serde_json::from_slice(&body)
        .map_err(|_| ApiError::invalid("the body must be a JSON object {\"name\": ...}"))?;
    tenant::validate_new_tenant(&name).map_err(|e| ApiError::invalid(e.to_string()))?;
    if !s.app.store.add_tenant(&name).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "tenant_exists",
            format!("the tenant {name:?} is registered already"),
        ));
    }
    let note = AuditNote {
        object: Some(format!("tenant {name}")),
        ..AuditNote::default()
    };
    Ok((
        StatusCode::CREATED,
        Extension(note),
        Json(view(&s, &name).await?),
    ))
}

#[utoipa::path(post, path = "/tenants/{name}/disable", tag = "tenants",
    params(("name" = String, Path, description = "The tenant's name")),
    responses(
        (status = 200, description = "Disabled: its jobs take no new runs, its tokens stop working", body = views::TenantView),
        (status = 404, description = "`unknown_tenant`; `not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn disable(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult {
    set_active(&s, &who, &name, false).await
}

#[utoipa::path(post, path = "/tenants/{name}/enable", tag = "tenants",
    params(("name" = String, Path, description = "The tenant's name")),
    responses(
        (status = 200, description = "Enabled", body = views::TenantView),
        (status = 404, description = "`unknown_tenant`; `not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn enable(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult {
    set_active(&s, &who, &name, true).await
}

async fn set_active(s: &Shared, who: &Principal, name: &str, active: bool) -> ApiResult {
    operator_only(who)?;
    if !params::is_tenant_name(name) || !s.app.store.set_tenant_active(name, active).await? {
        return Err(unknown_tenant(name));
    }
    tracing::info!(tenant = %name, active, "tenant changed");
    Ok(Json(view(s, name).await?))
}

async fn view(s: &Shared, name: &str) -> Result<Value, ApiError> {
    let tenant = s.app.store.get_tenant(name).await?;
    tenant
        .as_ref()
        .map(views::tenant)
        .ok_or_else(|| unknown_tenant(name))
}

fn unknown_tenant(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_tenant",
        format!("no tenant named {name:?}"),
    )
}
