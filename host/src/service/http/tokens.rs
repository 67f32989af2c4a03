//! `/tokens`: the API's bearer tokens, for operators (read-only tokens list them, and
//! change nothing); to a tenant's token these paths do not exist. `GET /whoami`: what the
//! caller's own token is, so the console shows only the controls it may use.

use super::audit::{AuditNote, Caller};
use super::error::{ApiError, ErrorBody};
use super::params::{self, ApiPath};
use super::state::Shared;
use super::visible::operator_only;
use crate::rules::tenant::{self, NewToken, Principal};
use crate::service::views;
use crate::store::NewTokenRow;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// The caller's own token.
#[derive(Serialize, ToSchema)]
pub(super) struct WhoAmI {
    /// `operator`, `read_only` or `tenant`.
    kind: &'static str,
    tenant: Option<String>,
    token_id: String,
    label: String,
}

#[utoipa::path(get, path = "/whoami", tag = "tokens",
    responses((status = 200, description = "What the caller's token is", body = WhoAmI)))]
pub(super) async fn whoami(
    Extension(who): Extension<Principal>,
    Extension(caller): Extension<Caller>,
) -> Json<WhoAmI> {
    Json(WhoAmI {
        kind: views::token_kind(who.tenant(), caller.read_only),
        tenant: who.tenant().map(str::to_string),
        token_id: caller.token_id,
        label: caller.label,
    })
}

/// `GET /tokens`.
#[derive(Serialize, ToSchema)]
pub(super) struct TokenList {
    #[schema(value_type = Vec<views::TokenView>)]
    tokens: Vec<Value>,
}

#[utoipa::path(get, path = "/tokens", tag = "tokens",
    responses(
        (status = 200, description = "Every token (never a secret)", body = TokenList),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<TokenList>, ApiError> {
    operator_only(&who)?;
    let tokens: Vec<Value> = s
        .app
        .store
        .list_tokens()
        .await?
        .iter()
        .map(views::token)
        .collect();
    Ok(Json(TokenList { tokens }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenBody {
    /// A tenant's token (sees only its tenant's); an operator's if left out.
    tenant: Option<String>,
    #[serde(default)]
    label: String,
    #[serde(default)]
    read_only: bool,
    /// How long it lives (`90m`, `12h`, `30d`; at most `3650d`); for ever if not given.
    expires: Option<String>,
}

/// A token made: its view, and its secret, shown this once.
#[derive(Serialize, ToSchema)]
pub(super) struct Issued {
    #[serde(flatten)]
    view: views::TokenView,
    /// The bearer token itself: only a hash of it is kept.
    token: String,
}

/// `POST /tokens`: 201 with the token, shown this once.
#[utoipa::path(post, path = "/tokens", tag = "tokens", request_body = TokenBody,
    responses(
        (status = 201, description = "Made; the secret is in this answer only", body = Issued),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`unknown_tenant`; `not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn create(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Extension<AuditNote>, Json<Issued>), ApiError> {
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
    let view = listed
        .iter()
        .find(|t| t.id == issued.id)
        .map(views::token_view)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the token was made but could not be read back; revoke it and make another",
            )
        })?;
    let answer = Issued {
        view,
        token: issued.token,
    };
    Ok((StatusCode::CREATED, Extension(note), Json(answer)))
}

/// A token revoked.
#[derive(Serialize, ToSchema)]
pub(super) struct Revoked {
    id: String,
    revoked: bool,
}

/// `DELETE /tokens/{id}`: revoked at once.
#[utoipa::path(delete, path = "/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "The token's id")),
    responses(
        (status = 200, description = "Revoked at once", body = Revoked),
        (status = 404, description = "`unknown_token`; `not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn revoke(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Revoked>, ApiError> {
    operator_only(&who)?;
    if !tenant::is_token_id(&id) || !s.app.store.revoke_token(&id).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_token",
            "no live token with that id",
        ));
    }
    tracing::info!(token = %id, "token revoked");
    Ok(Json(Revoked { id, revoked: true }))
}
