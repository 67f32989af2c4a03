//! `POST /runs/{id}/signals/{name}`: a signal to a run, which a pass may wait for
//! (`run.wait-for-signal`) and read (`run.signal`). The body (`{"payload": ..., "id":
//! ...}`, both optional) is checked before anything is written; a tenant signals only its
//! own runs (another's is unknown to it); a send with an id already stored is the same
//! signal, answered again. The rows are `store::signals`'.

use super::error::{ApiError, ErrorBody};
use super::params::{ApiPath, is_run_id};
use super::state::Shared;
use crate::rules::signal::{check_id, check_name, check_payload};
use crate::rules::tenant::Principal;
use crate::store::records::new_run_id;
use crate::store::signals::{NewSignal, Signalled};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::sync::Arc;

const BODY_SHAPE: &str = "the body must be a JSON object of payload (any JSON value) and id \
    (a string), both optional";

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SignalBody {
    /// Any JSON of at most 64 KiB (null if left out).
    #[schema(value_type = Option<serde_json::Value>)]
    payload: Option<Box<RawValue>>,
    /// 1-128 of `A-Za-z0-9._:-`: the same id sent again is the same signal. One of the
    /// host's if left out.
    id: Option<String>,
}

/// A signal stored.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct SignalSent {
    run_id: String,
    name: String,
    signal_id: String,
    /// Its id was sent before with the same name and payload: nothing new was stored.
    duplicate: bool,
    /// The run waited for it and is due now.
    woke: bool,
}

/// Stores the signal: 201 when new (`woke`: the run waited for it and is due now), 200
/// when its id was sent before with the same name and payload.
#[utoipa::path(post, path = "/runs/{id}/signals/{name}", tag = "runs",
    params(("id" = String, Path, description = "The run's id"),
        ("name" = String, Path, description = "The signal's name, job-like")),
    request_body(content = Option<SignalBody>, description = "Empty: a null payload and an id of the host's"),
    responses(
        (status = 201, description = "Stored", body = SignalSent),
        (status = 200, description = "The same id sent before (`duplicate`)", body = SignalSent),
        (status = 400, description = "`invalid_parameter`: the name, payload or id", body = ErrorBody),
        (status = 404, description = "`unknown_run`, also another tenant's", body = ErrorBody),
        (status = 409, description = "`run_ended`, `signal_id_reused`, `too_many_signals`", body = ErrorBody)))]
pub(super) async fn send(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath((id, name)): ApiPath<(String, String)>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<SignalSent>), ApiError> {
    if !is_run_id(&id) {
        return Err(unknown_run(&id));
    }
    check_name(&name).map_err(|refusal| ApiError::invalid(refusal.to_string()))?;
    let body: SignalBody = if body.is_empty() {
        SignalBody {
            payload: None,
            id: None,
        }
    } else {
        super::params::json_body(&body, BODY_SHAPE)?
    };
    let payload = match &body.payload {
        Some(raw) => check_payload(raw.get().as_bytes()),
        None => check_payload(b"null"),
    }
    .map_err(|refusal| ApiError::invalid(refusal.to_string()))?;
    let signal_id = match body.id {
        Some(given) => {
            check_id(&given).map_err(|refusal| ApiError::invalid(refusal.to_string()))?;
            given
        }
        None => new_run_id(),
    };
    let sent = s
        .app
        .store
        .send_signal(&NewSignal {
            run_id: &id,
            tenant: who.tenant(),
            name: &name,
            signal_id: &signal_id,
            payload: &payload,
        })
        .await?;
    let answer = |duplicate: bool, woke: bool| SignalSent {
        run_id: id.clone(),
        name: name.clone(),
        signal_id: signal_id.clone(),
        duplicate,
        woke,
    };
    match sent {
        Signalled::Sent { woke } => {
            if woke {
                s.app.wake.notify_one();
            }
            Ok((StatusCode::CREATED, Json(answer(false, woke))))
        }
        Signalled::Duplicate => Ok((StatusCode::OK, Json(answer(true, false)))),
        refused => Err(refusal(&id, &signal_id, refused)),
    }
}

fn unknown_run(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_run",
        format!("no run {id:?}"),
    )
}

/// A send the store refused, as the API says it.
fn refusal(id: &str, signal_id: &str, refused: Signalled) -> ApiError {
    match refused {
        Signalled::Ended(status) => ApiError::new(
            StatusCode::CONFLICT,
            "run_ended",
            format!("run {id:?} has ended ({status}): no pass will read a signal"),
        ),
        Signalled::IdReused => ApiError::new(
            StatusCode::CONFLICT,
            "signal_id_reused",
            format!(
                "id: the signal {signal_id:?} was sent to this run before with another name or payload"
            ),
        ),
        Signalled::TooMany => ApiError::new(
            StatusCode::CONFLICT,
            "too_many_signals",
            format!(
                "run {id:?} keeps {} unread signals already",
                crate::rules::signal::MAX_UNREAD
            ),
        ),
        Signalled::UnknownRun | Signalled::Sent { .. } | Signalled::Duplicate => unknown_run(id),
    }
}
