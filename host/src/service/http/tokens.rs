//! `/tokens`: the API's bearer tokens, for operators (read-only tokens list them, and
//! change nothing); to a tenant's token these paths do not exist. `GET /whoami`: what the
//! caller's own token is, so the console shows only the controls it may use.

use super::audit::{AuditNote, Caller};
use super::error::{ApiError, ApiResult};
use super::params::{self, ApiPath};
use super::state::Shared;
use super::visible::operator_only;
use crate::rules::tenant::{self, NewToken, Principal};
use crate::service::views;
use crate::store::NewTokenRow;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) async fn whoami(
    Extension(who): Extension<Principal>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    Json(json!({
        "kind": views::token_kind(who.tenant(), caller.read_only),
        "tenant": who.tenant(),
        "token_id": caller.token_id,
        "label": caller.label,
    }))
}

pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> ApiResult {
    operator_only(&who)?;
    let tokens: Vec<Value> = s
        .app
        .store
        .list_tokens()
        .await?
        .iter()
        .map(views::token)
        .collect();
    Ok(Json(json!({ "tokens": tokens })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenBody {
    tenant: Option<String>,
    #[serde(default)]
    label: String,
    #[serde(default)]
    read_only: bool,
    /// How long it lives (`30d`); for ever if not given.
    expires: Option<String>,
}

/// `POST /tokens`: 201 with the token, shown this once.
pub(super) async fn create(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Extension<AuditNote>, Json<Value>), ApiError> {
    operator_only(&who)?;
    let body: TokenBody = params::json_body(
        &body,
        "the body must be a JSON object of tenant, label, read_only and expires",
    )?;
    let asked = NewToken {
        tenant: body.tenant.as_deref(),
        label: &body.label,
        read_only: body.read_only,
        expires: body.expires.as_deref(),
    };
    let expires_in_ms = asked
        .check()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    if let Some(name) = &body.tenant
        && s.app.store.get_tenant(name).await?.is_none()
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_tenant",
            format!("no tenant named {name:?}"),
        ));
    }
    let issued = tenant::issue();
    s.app
        .store
        .insert_token(&NewTokenRow {
            id: &issued.id,
            secret_hash: &issued.secret_hash,
            tenant: body.tenant.as_deref(),
            label: &body.label,
            read_only: body.read_only,
            expires_in_ms,
        })
        .await?;
    let note = AuditNote {
        object: Some(format!("token {}", issued.id)),
        ..AuditNote::default()
    };
    let listed = s.app.store.list_tokens().await?;
    let mut view = listed
        .iter()
        .find(|t| t.id == issued.id)
        .map_or_else(|| json!({"id": issued.id}), views::token);
    view["token"] = issued.token.into();
    Ok((StatusCode::CREATED, Extension(note), Json(view)))
}

/// `DELETE /tokens/{id}`: revoked at once.
pub(super) async fn revoke(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult {
    operator_only(&who)?;
    if !tenant::is_token_id(&id) || !s.app.store.revoke_token(&id).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_token",
            "no live token with that id",
        ));
    }
    tracing::info!(token = %id, "token revoked");
    Ok(Json(json!({ "id": id, "revoked": true })))
}
