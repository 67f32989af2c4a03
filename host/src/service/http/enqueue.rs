//! `POST /jobs/{job}/kick`, and `POST /jobs/{job}/runs` and `POST /jobs/{job}/runs:batch`:
//! runs started from outside with options (`run_at` or `delay`, `priority`, `max_attempts`,
//! `unique`; `rules::enqueue`). Every
//! item is read and checked before anything is written; a batch is one transaction, and
//! a refused item refuses it whole, naming the item and the field.

use super::audit::AuditNote;
use super::error::{ApiError, ErrorBody};
use super::params::{ApiPath, ApiQuery, trace_of};
use super::state::{Shared, refuse_if_draining};
use super::visible::{unknown_job, visible_job};
use crate::queue::kick::{self, KickError, StartRequest};
use crate::rules::enqueue::{FIELDS, MAX_BATCH, OptionError};
use crate::rules::json_rule::{JsonLimits, PAYLOAD};
use crate::rules::tenant::Principal;
use crate::store::JobRecord;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One start as the body gives it: each field as its text, read field by field.
type Item = BTreeMap<String, Box<RawValue>>;

const ITEM_SHAPE: &str = "a start is a JSON object of instance, payload, run_at or delay, \
    priority, max_attempts and unique";

/// One start's body, as `POST /jobs/{job}/runs` takes it. The handler reads it field by
/// field (`start_request`), so that a refusal names the field; this is its shape for
/// `GET /openapi.json`, and a test keeps its fields the ones `start_request` takes.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[expect(
    dead_code,
    reason = "the body's shape for the description: read field by field"
)]
pub(super) struct StartItem {
    /// The instance to start (`default` if none). A tenant's start of a per-tenant job is
    /// its own child.
    pub(super) instance: Option<String>,
    /// Any JSON of at most 256 KiB; the job's own payload if left out.
    pub(super) payload: Option<Value>,
    /// When it is due, RFC 3339 (at most a day in the past). Not with `delay`.
    pub(super) run_at: Option<String>,
    /// Due this long from now (`10m`, `1h`). Not with `run_at`.
    pub(super) delay: Option<String>,
    /// Seconds of precedence, -3600 to 3600.
    pub(super) priority: Option<i32>,
    /// The attempts a pass may use: 1 to the job's own (its `retries` + 1); the job's if
    /// left out.
    #[schema(minimum = 1)]
    pub(super) max_attempts: Option<u32>,
    pub(super) unique: Option<UniqueItem>,
}

/// One run per key: what another start of the key does while the key holds its run.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[expect(
    dead_code,
    reason = "the shape of `unique` for the description: `rules::enqueue` reads it"
)]
pub(super) struct UniqueItem {
    /// 1-200 characters.
    pub(super) key: String,
    /// How long the key holds its run: `queued` (the default), `active`,
    /// `until-finished`, or a period after it was queued (`1h`).
    #[serde(rename = "while")]
    pub(super) hold: Option<String>,
    /// `keep` (the default: answer with the run, `joined`), `replace` (a waiting run takes
    /// the new payload) or `debounce` (a waiting run takes the new due time).
    pub(super) on_conflict: Option<String>,
}

/// `POST /jobs/{job}/runs:batch`: its shape for the description (read as [`Item`]s).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[expect(
    dead_code,
    reason = "the batch's shape for the description: read as items"
)]
pub(super) struct StartBatch {
    /// 1 to 1 000 starts, each as `POST /jobs/{job}/runs` takes it.
    pub(super) runs: Vec<StartItem>,
}

/// The answers of a batch, in the order of its starts.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct StartedBatch {
    runs: Vec<kick::Started>,
}

/// Starts one run, or joins (replaces, debounces) the one its unique key names: 201 with
/// `result: created`, else 200.
#[utoipa::path(post, path = "/jobs/{name}/runs", tag = "jobs",
    params(("name" = String, Path, description = "The job's name"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context to join")),
    request_body(content = Option<StartItem>, description = "Empty: the default instance, now, the job's payload"),
    responses(
        (status = 201, description = "`result: created`", body = kick::Started),
        (status = 200, description = "`joined`, `replaced` or `debounced`: the run the key names", body = kick::Started),
        (status = 400, description = "`invalid_parameter`, naming the field", body = ErrorBody),
        (status = 404, description = "`unknown_job`, `unknown_tenant`", body = ErrorBody),
        (status = 409, description = "`job_orphaned`, `tenant_disabled`", body = ErrorBody),
        (status = 429, description = "`queue_full`: the tenant's `max_queued`", body = ErrorBody)))]
pub(super) async fn start_run(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Extension<AuditNote>, Json<kick::Started>), ApiError> {
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
        Err(e) => return Err(kick_refused(&s, &who, &name, e).await),
    };
    s.app.wake.notify_one();
    let status = if started.joined {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let note = AuditNote {
        run_id: Some(started.run_id.clone()),
        ..AuditNote::default()
    };
    Ok((status, Extension(note), Json(started)))
}

/// Starts up to [`MAX_BATCH`] runs of one job in one transaction: `{"runs": [...]}`, each
/// item as `POST /jobs/{job}/runs` takes it; the answers in their order.
#[utoipa::path(post, path = "/jobs/{name}/runs:batch", tag = "jobs",
    params(("name" = String, Path, description = "The job's name"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context to join")),
    request_body = StartBatch,
    responses(
        (status = 200, description = "Each start's answer, in order", body = StartedBatch),
        (status = 400, description = "`invalid_parameter`, naming `runs[i].field`: nothing was written", body = ErrorBody),
        (status = 404, description = "`unknown_job`, `unknown_tenant`", body = ErrorBody),
        (status = 409, description = "`job_orphaned`, `tenant_disabled`", body = ErrorBody),
        (status = 429, description = "`queue_full`", body = ErrorBody)))]
pub(super) async fn start_batch(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<StartedBatch>, ApiError> {
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
        Err(KickError::Option { item, error }) => {
            return Err(ApiError::invalid(format!("runs[{item}].{error}")));
        }
        Err(e) => return Err(kick_refused(&s, &who, &name, e).await),
    };
    s.app.wake.notify_one();
    Ok(Json(StartedBatch { runs: started }))
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
    let instance = instance_for(who, job, instance.as_deref())?;
    let options = crate::rules::enqueue::from_json(&options, now)
        .map_err(|e: OptionError| refused(e.to_string()))?;
    Ok(StartRequest {
        instance,
        payload: item.get("payload").map(|p| p.get().to_string()),
        options,
    })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct KickQuery {
    /// The instance to kick (`default` if none); of a per-tenant job, a tenant's child.
    instance: Option<String>,
}

#[utoipa::path(post, path = "/jobs/{name}/kick", tag = "jobs",
    params(("name" = String, Path, description = "The job's name"), KickQuery,
        ("traceparent" = Option<String>, Header, description = "W3C trace context to join")),
    responses(
        (status = 202, description = "What the kick did (`result`)", body = kick::Kicked),
        (status = 400, description = "`invalid_parameter`", body = ErrorBody),
        (status = 404, description = "`unknown_job`, `unknown_tenant`", body = ErrorBody),
        (status = 409, description = "`job_orphaned`, `tenant_disabled`", body = ErrorBody),
        (status = 429, description = "`queue_full`", body = ErrorBody)))]
pub(super) async fn kick_job(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<KickQuery>,
    headers: HeaderMap,
) -> Result<(StatusCode, Extension<AuditNote>, Json<kick::Kicked>), ApiError> {
    refuse_if_draining(&s, "kick another")?;
    let job = visible_job(&s, &who, &name).await?;
    let instance = instance_for(&who, &job, q.instance.as_deref())?;
    match kick::kick_job(&s.app.store, &job, &instance, trace_of(&headers)).await {
        Ok(kicked) => {
            let result = match &kicked {
                kick::Kicked::Pending => "pending",
                kick::Kicked::Queued { .. } => "queued",
                kick::Kicked::Dropped { .. } => "dropped",
                kick::Kicked::FannedOut { .. } => "fanned_out",
                kick::Kicked::QueueFull => "queue_full",
            };
            s.app
                .metrics
                .kick(&name, kicked_tenant(&job, &instance), result);
            s.app.wake.notify_one();
            let note = AuditNote {
                run_id: match &kicked {
                    kick::Kicked::Queued { run_id } | kick::Kicked::Dropped { run_id, .. } => {
                        Some(run_id.clone())
                    }
                    _ => None,
                },
                ..AuditNote::default()
            };
            Ok((StatusCode::ACCEPTED, Extension(note), Json(kicked)))
        }
        Err(e) => Err(kick_refused(&s, &who, &name, e).await),
    }
}

/// The tenant whose runs a kick of `job` for `instance` queues: the instance's for a
/// per-tenant job's child, else the job's.
fn kicked_tenant<'a>(job: &'a JobRecord, instance: &'a str) -> &'a str {
    if job.per_tenant != 0 && instance != kick::DEFAULT_INSTANCE {
        instance
    } else {
        &job.tenant
    }
}

/// The instance a kick or start of `job` by `who` is for. A tenant's kick or start of a
/// per-tenant job is for its own child, whatever it asked.
fn instance_for(who: &Principal, job: &JobRecord, asked: Option<&str>) -> Result<String, ApiError> {
    let asked = asked.unwrap_or(kick::DEFAULT_INSTANCE);
    crate::rules::job::validate_instance(asked).map_err(|e| ApiError::invalid(e.to_string()))?;
    match who.tenant() {
        Some(own) if job.per_tenant != 0 => {
            if asked != kick::DEFAULT_INSTANCE && asked != own {
                return Err(ApiError::invalid(
                    "a tenant kicks and starts its own child of a per-tenant job: leave out the instance",
                ));
            }
            Ok(own.to_string())
        }
        _ => Ok(asked.to_string()),
    }
}

async fn kick_refused(s: &Shared, who: &Principal, name: &str, error: KickError) -> ApiError {
    match error {
        KickError::UnknownJob(_) => unknown_job(s, who, name).await,
        KickError::UnknownTenant(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_tenant", error.to_string())
        }
        KickError::Orphaned(_) => {
            ApiError::new(StatusCode::CONFLICT, "job_orphaned", error.to_string())
        }
        KickError::TenantDisabled(_) => {
            ApiError::new(StatusCode::CONFLICT, "tenant_disabled", error.to_string())
        }
        KickError::QueueFull(_) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            error.to_string(),
        ),
        KickError::Payload(e) => ApiError::invalid(e.to_string()),
        KickError::Option { error, .. } => ApiError::invalid(error.to_string()),
        KickError::Store(e) => e.into(),
    }
}
