//! `POST /jobs/{job}/runs` and `POST /jobs/{job}/runs:batch`: runs started from outside
//! with options (`run_at` or `delay`, `priority`, `unique`; `rules::enqueue`). Every
//! item is read and checked before anything is written; a batch is one transaction, and
//! a refused item refuses it whole, naming the item and the field.

use super::error::ApiError;
use super::params::{ApiPath, trace_of};
use super::state::{Shared, refuse_if_draining};
use super::visible::visible_job;
use crate::queue::kick::{self, StartRequest};
use crate::rules::enqueue::{FIELDS, MAX_BATCH, OptionError};
use crate::rules::json_rule::{JsonLimits, PAYLOAD};
use crate::rules::tenant::Principal;
use crate::store::JobRecord;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One start as the body gives it: each field as its text, read field by field.
type Item = BTreeMap<String, Box<RawValue>>;

const ITEM_SHAPE: &str = "a start is a JSON object of instance, payload, run_at or delay, \
    priority and unique";

/// Starts one run, or joins (replaces, debounces) the one its unique key names: 201 with
/// `result: created`, else 200.
pub(super) async fn start_run(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    refuse_if_draining(&s, "start on another")?;
    let job = visible_job(&s, &who, &name).await?;
    let item: Item = if body.is_empty() {
        Item::new()
    } else {
        super::params::json_body(&body, ITEM_SHAPE)?
    };
    let now = s.app.store.now().await?;
    let request = start_request(&who, &job, &item, now, "")?;
    let started = match kick::start_all(&s.app.store, &job, vec![request], trace_of(&headers)).await
    {
        Ok(mut started) => started.pop().expect("one answer a request"),
        Err(e) => return Err(super::kick_refused(&s, &who, &name, e).await),
    };
    s.app.wake.notify_one();
    let status = if started.joined {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(serde_json::to_value(started).expect("serialisable")),
    ))
}

/// Starts up to [`MAX_BATCH`] runs of one job in one transaction: `{"runs": [...]}`, each
/// item as `POST /jobs/{job}/runs` takes it; the answers in their order.
pub(super) async fn start_batch(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    refuse_if_draining(&s, "start on another")?;
    let job = visible_job(&s, &who, &name).await?;
    let limits = JsonLimits {
        max_bytes: super::server::MAX_BODY,
        max_depth: PAYLOAD.max_depth + 2,
    };
    crate::rules::json_rule::check(&body, limits)
        .map_err(|refusal| ApiError::invalid(format!("body refused: {refusal}")))?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Batch {
        runs: Vec<Item>,
    }
    let batch: Batch = serde_json::from_slice(&body).map_err(|_| {
        ApiError::invalid("the body must be {\"runs\": [...]}, each a JSON object of a start")
    })?;
    if batch.runs.is_empty() || batch.runs.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "runs: 1 to {MAX_BATCH} starts in a batch"
        )));
    }
    let now = s.app.store.now().await?;
    let requests = batch
        .runs
        .iter()
        .enumerate()
        .map(|(i, item)| start_request(&who, &job, item, now, &format!("runs[{i}].")))
        .collect::<Result<Vec<_>, _>>()?;
    let started = match kick::start_all(&s.app.store, &job, requests, trace_of(&headers)).await {
        Ok(started) => started,
        Err(e) => return Err(super::kick_refused(&s, &who, &name, e).await),
    };
    s.app.wake.notify_one();
    Ok(Json(json!({ "runs": started })))
}

/// One start read from its body: the instance `who` may start, the payload as given, the
/// options checked at the database's time `now`. A refusal names the field, after `at`
/// (a batch's item).
fn start_request(
    who: &Principal,
    job: &JobRecord,
    item: &Item,
    now: i64,
    at: &str,
) -> Result<StartRequest, ApiError> {
    let refused = |message: String| ApiError::invalid(format!("{at}{message}"));
    let mut options = Map::new();
    let mut instance = None;
    for (field, raw) in item {
        match field.as_str() {
            "payload" => {}
            "instance" => {
                let asked: String = serde_json::from_str(raw.get())
                    .map_err(|_| refused("instance: a string".into()))?;
                instance = Some(asked);
            }
            f if FIELDS.contains(&f) => {
                let value: Value = serde_json::from_str(raw.get()).expect("checked JSON");
                options.insert(field.clone(), value);
            }
            other => {
                return Err(refused(format!(
                    "{other}: not a field of a start (instance, payload, {})",
                    FIELDS.join(", ")
                )));
            }
        }
    }
    let instance = super::instance_for(who, job, instance.as_deref())?;
    let options = crate::rules::enqueue::from_json(&options, now)
        .map_err(|e: OptionError| refused(e.to_string()))?;
    Ok(StartRequest {
        instance,
        payload: item.get("payload").map(|p| p.get().to_string()),
        options,
    })
}
