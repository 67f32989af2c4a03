//! The API's one error: a status, a fixed code and a message written for the caller, as
//! JSON `{"error": {"code": ..., "message": ...}}`. A store failure becomes `unavailable`
//! here and is logged, never shown.

use crate::store::{ErrorClass, StoreError};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The fixed code of an error answer, kept in its response for its audit row.
#[derive(Debug, Clone, Copy)]
pub(super) struct ErrorCode(pub(super) &'static str);

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_parameter", message)
    }
}

impl From<StoreError> for ApiError {
    /// A value the database refused came from the request (parameters are checked before
    /// any query, so this is a second line); anything else is the database's state.
    fn from(e: StoreError) -> Self {
        if e.class() == ErrorClass::InvalidValue {
            tracing::info!(code = "invalid_parameter", error = %e, "the database refused a request's value");
            return Self::invalid("the database refused a value of the request");
        }
        tracing::warn!(code = "driver_failed", error = %e, "API request failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the database is unavailable",
        )
    }
}

/// Every error answer's body: what a client matches on is `error.code`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// The fixed code (`docs/failure-codes.md`), e.g. `unknown_run`, `invalid_parameter`.
    #[schema(example = "invalid_parameter")]
    pub code: String,
    /// Words for a person, naming the field or object; may change between versions.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        response.extensions_mut().insert(ErrorCode(self.code));
        response
    }
}

pub(super) type ApiResult = Result<Json<Value>, ApiError>;
