//! The API's path and query parameters, read and checked before any query: a client's
//! text reaches the database only once it could name something that exists. A path that
//! is not valid text names nothing (404 `not_found`); a query string that cannot be read
//! is `400 invalid_parameter`, in the JSON body every other error has. A request's
//! `traceparent` header and a body that carries a payload are read here too.

use super::error::ApiError;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// Longest run id the API looks up. The host's ids are UUIDs (36 characters).
const MAX_RUN_ID: usize = 128;

/// `Path`, answering an undecodable segment (invalid UTF-8 escapes) with 404 `not_found`.
pub(super) struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(_) => Err(not_found()),
        }
    }
}

/// `Query`, answering a query string it cannot read (a number out of range, a parameter
/// given twice, an escape that is not UTF-8) with 400 `invalid_parameter`.
pub(super) struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::try_from_uri(&parts.uri)
            .map(|Query(value)| ApiQuery(value))
            .map_err(|_| {
                ApiError::invalid(
                    "the query string cannot be read: give each parameter once, `limit` as a \
                     whole number, and text as UTF-8",
                )
            })
    }
}

/// What no route serves.
pub(super) fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
}

/// Whether `name` may be a job's: the job name rule.
pub(super) fn is_job_name(name: &str) -> bool {
    crate::rules::job::validate_name(name).is_ok()
}

/// Whether `name` may be a tenant's: the tenant name rule.
pub(super) fn is_tenant_name(name: &str) -> bool {
    crate::rules::tenant::validate_tenant(name).is_ok()
}

/// Whether `id` may be a run's: the host's ids are UUIDs, and runs a script queued carry
/// ids of its own, so any short printable ASCII text is looked up, and nothing else.
pub(super) fn is_run_id(id: &str) -> bool {
    (1..=MAX_RUN_ID).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A `job=` filter: a valid job name, or 400.
pub(super) fn job_filter(job: Option<String>) -> Result<Option<String>, ApiError> {
    match job {
        Some(name) if !is_job_name(&name) => Err(ApiError::invalid(
            "job: use a job name (lowercase letters, digits and . _ -)",
        )),
        job => Ok(job),
    }
}

/// The request's trace context: its one `traceparent` header if well formed, else `None`
/// (the host starts a trace). Sent by an untrusted client, so never echoed.
pub(super) fn trace_of(headers: &HeaderMap) -> Option<crate::rules::trace::TraceParent> {
    let values = headers.get_all("traceparent").into_iter();
    crate::rules::trace::TraceParent::from_headers(values.map(|v| v.as_bytes()))
}

/// A request body that carries a payload: checked by the queue-safety rule first, so a
/// refusal names the JSON path (`$.payload.items[3]`), then read as `T`.
pub(super) fn json_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> Result<T, ApiError> {
    let limits = crate::rules::json_rule::JsonLimits {
        max_bytes: crate::rules::json_rule::PAYLOAD.max_bytes + 1024,
        max_depth: crate::rules::json_rule::PAYLOAD.max_depth + 1,
    };
    crate::rules::json_rule::check(body, limits)
        .map_err(|refusal| ApiError::invalid(format!("body refused: {refusal}")))?;
    serde_json::from_slice(body).map_err(|_| ApiError::invalid(shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_that_could_exist_are_looked_up() {
        assert!(is_run_id("0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"));
        assert!(is_run_id("import-17"));
        for bad in ["", "x\0", "\0", "a b", "x\u{202e}", "é", &"a".repeat(129)] {
            assert!(!is_run_id(bad), "{bad:?}");
        }
        assert!(is_job_name("nightly-report.v2"));
        for bad in ["", "x\0", "X", "a/b", "a\u{2060}"] {
            assert!(!is_job_name(bad), "{bad:?}");
            assert!(!is_tenant_name(bad), "{bad:?}");
        }
        assert!(job_filter(Some("x\0".into())).is_err());
        assert_eq!(job_filter(None).ok(), Some(None));
    }
}
