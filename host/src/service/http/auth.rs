//! Bearer tokens on the API: every request but the open probes names its principal.
//!
//! A missing, malformed, unknown or revoked token, or one of a disabled tenant, gets the
//! same 401 `unauthenticated`, so a caller learns nothing about which tokens exist. A
//! token past its expiry gets 401 `token_expired`: only its holder, who has its secret,
//! is told so. A read-only token is an operator's principal; what it may not change is
//! refused where every change is answered (`audit::record`).

use super::audit::Caller;
use super::error::ApiError;
use super::state::Shared;
use crate::rules::tenant::{self, Principal};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Resolves the request's token to a [`Principal`] for the handlers, or refuses it.
pub(super) async fn authenticate(
    State(s): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match principal(&s, request.headers()).await {
        Ok((principal, caller)) => {
            request.extensions_mut().insert(principal);
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refused) => refused,
    }
}

/// Whether the request carries a token at all (`/metrics` answers without one).
pub(super) fn has_token(headers: &HeaderMap) -> bool {
    headers.contains_key(header::AUTHORIZATION)
}

/// The principal the request's token names and who the token is, or the answer that
/// refuses it.
pub(super) async fn principal(
    s: &Shared,
    headers: &HeaderMap,
) -> Result<(Principal, Caller), Response> {
    let Some((id, secret)) = bearer(headers).and_then(tenant::parse) else {
        return Err(unauthenticated());
    };
    let check = s
        .app
        .store
        .check_token(id)
        .await
        .map_err(|e| ApiError::from(e).into_response())?;
    let Some(check) = check.filter(|c| tenant::secret_matches(secret, &c.secret_hash)) else {
        return Err(unauthenticated());
    };
    if check.tenant_active == 0 {
        return Err(unauthenticated());
    }
    if check.expired != 0 {
        return Err(refused(
            "token_expired",
            "this token has expired: ask an operator for a new one (`host tokens create --expires 30d`)",
        ));
    }
    let caller = Caller {
        token_id: id.to_string(),
        label: check.label,
        read_only: check.read_only != 0,
    };
    let principal = match check.tenant {
        None => Principal::Operator,
        Some(name) => Principal::Tenant(name),
    };
    Ok((principal, caller))
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn unauthenticated() -> Response {
    refused(
        "unauthenticated",
        "this API needs a bearer token (Authorization: Bearer <token>); an operator creates one with `host tokens create`",
    )
}

fn refused(code: &'static str, message: &'static str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, code, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &[u8]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            header::AUTHORIZATION,
            header::HeaderValue::from_bytes(value).unwrap(),
        );
        map
    }

    #[test]
    fn only_a_bearer_header_carries_a_token() {
        assert_eq!(bearer(&headers(b"Bearer jh_a_b")), Some("jh_a_b"));
        assert_eq!(bearer(&headers(b"bearer  jh_a_b ")), Some("jh_a_b"));
        assert_eq!(bearer(&headers(b"Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer(&headers(b"Bearer")), None);
        assert_eq!(bearer(&headers(b"Bearer \xff\xfe")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
