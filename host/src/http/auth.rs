//! Bearer tokens on the API: every request but the open probes names its principal.
//!
//! A missing, malformed, unknown or revoked token, or one of a disabled tenant, gets the
//! same 401 `unauthenticated`, so a caller learns nothing about which tokens exist.

use super::ApiError;
use crate::serve::Shared;
use crate::tenant::{self, Principal};
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
    let Some((id, secret)) = bearer(request.headers()).and_then(tenant::parse) else {
        return unauthenticated();
    };
    let check = match s.app.store.check_token(id).await {
        Ok(check) => check,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let Some(check) = check.filter(|c| tenant::secret_matches(secret, &c.secret_hash)) else {
        return unauthenticated();
    };
    if check.tenant_active == 0 {
        return unauthenticated();
    }
    let principal = match check.tenant {
        None => Principal::Operator,
        Some(name) => Principal::Tenant(name),
    };
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn unauthenticated() -> Response {
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "this API needs a bearer token (Authorization: Bearer <token>); an operator creates one with `host tokens create`",
    )
    .into_response();
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
