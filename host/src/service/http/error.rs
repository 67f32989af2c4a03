//! The API's one error: a status, a fixed code and a message written for the caller, as
//! JSON `{"error": {"code": ..., "message": ...}}`. A store failure becomes `unavailable`
//! here and is logged, never shown.

use crate::store::{ErrorClass, StoreError};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        response.extensions_mut().insert(ErrorCode(self.code));
        response
    }
}

pub(super) type ApiResult = Result<Json<Value>, ApiError>;
