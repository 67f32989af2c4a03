//! What the console's charts and live updates read: the overview (runs ended per bucket
//! by outcome, queue depth and lag per lane over time, workers, recent failures), a job's
//! statistics (success rate, duration percentiles over time, next fire times), and a
//! stream of pulses.
//!
//! The database's cost does not grow with the pages open: one pulse loop per host reads
//! its counts (and when a live log last changed) every [`PULSE_EVERY`] while any page listens, and every page gets the same
//! pulse; a page reads its view again only when the pulse's `version` changed. Lane
//! history is sampled by the host every [`SAMPLE_EVERY`] (one query) and kept in memory
//! for a day: it is this host's view since it started.

use super::error::{ApiError, ApiResult};
use super::params::{ApiPath, ApiQuery};
use super::state::Shared;
use super::state::{LaneSample, PULSE_EVERY};
use crate::rules::tenant::Principal;
use crate::service::views;
use crate::store::RunStatus;
use axum::Json;
use axum::extract::{Extension, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often each lane's queue is sampled for its history.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples kept: a day's.
const SAMPLES_KEPT: usize = 8640;
/// Most ended runs a job's statistics read.
const STATS_ROWS: i64 = 20_000;
const HOUR_MS: i64 = 3_600_000;

/// A lane's due runs and how long the oldest has waited: those a pause holds (of their
/// job, tenant or lane) apart, so a deliberate pause does not read as a lagging queue.
#[derive(Debug, Clone, Copy, Default)]
struct LaneQueue {
    depth: i64,
    lag_ms: i64,
    paused_depth: i64,
    paused_lag_ms: i64,
}

/// Each lane's due runs and the oldest one's wait, summed over its jobs (a tenant's
/// token: that tenant's runs).
async fn lane_queues(
    s: &Shared,
    tenant: Option<&str>,
) -> Result<BTreeMap<String, LaneQueue>, crate::store::StoreError> {
    let mut lanes: BTreeMap<String, LaneQueue> = s
        .lanes
        .keys()
        .map(|lane| (lane.clone(), LaneQueue::default()))
        .collect();
    let pauses = s.app.runner.pauses().current().await?;
    for (run_tenant, job, due, lag_ms) in s.app.store.queue_lag_by_tenant_and_job().await? {
        if tenant.is_some_and(|own| own != run_tenant) {
            continue;
        }
        let lane = s.catalog.lane_of(&job);
        let held = !pauses.holding(&job, &run_tenant, &lane).is_empty();
        let entry = lanes.entry(lane).or_default();
        if held {
            entry.paused_depth += due;
            entry.paused_lag_ms = entry.paused_lag_ms.max(lag_ms);
        } else {
            entry.depth += due;
            entry.lag_ms = entry.lag_ms.max(lag_ms);
        }
    }
    Ok(lanes)
}

/// Samples every lane's queue every [`SAMPLE_EVERY`] until `stop`.
pub async fn sample_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        match sample(&shared).await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "sampling the queues failed")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(SAMPLE_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn sample(s: &Shared) -> Result<(), crate::store::StoreError> {
    let at = s.app.store.now().await?;
    let queues = lane_queues(s, None).await?;
    let busy = s.app.runner.interrupts().busy_by_lane();
    let mut samples = s.console.samples();
    for (lane, queue) in queues {
        samples.push_back(LaneSample {
            at,
            busy: busy.get(&lane).copied().unwrap_or(0),
            lane,
            depth: queue.depth,
            lag_ms: queue.lag_ms,
        });
    }
    let lanes = s.lanes.len().max(1);
    while samples.len() > SAMPLES_KEPT * lanes {
        samples.pop_front();
    }
    Ok(())
}

/// What the pulse becomes when the host stops: every stream ends, so a page left open does
/// not hold the host's shutdown for its grace period.
const CLOSED: &str = "closed";

/// Reads the pulse every [`PULSE_EVERY`] while a page listens, until `stop`.
pub async fn pulse_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        if shared.console.pulse.receiver_count() > 0 {
            match pulse(&shared).await {
                Ok(value) => {
                    shared.console.pulse.send_if_modified(|old| {
                        let changed = old.get("version") != value.get("version");
                        *old = value;
                        changed
                    });
                }
                Err(e) => {
                    tracing::warn!(code = "driver_failed", error = %e, "reading the pulse failed")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(PULSE_EVERY) => {}
            _ = stop.wait_for(|s| *s) => {
                shared.console.pulse.send_replace(Value::from(CLOSED));
                return;
            }
        }
    }
}

async fn pulse(s: &Shared) -> Result<Value, crate::store::StoreError> {
    let now = s.app.store.now().await?;
    let (queued, running, newest, logged) = s.app.store.live_counts().await?;
    let pauses = s.app.runner.pauses().current().await?.pauses.len();
    let busy = s.app.runner.interrupts().running().len();
    Ok(json!({
        "at": views::time(now),
        "version": format!("{queued}.{running}.{newest}.{pauses}.{logged}"),
        "queued": queued,
        "running": running,
        "busy": busy,
    }))
}

/// `GET /stream`: a pulse now and whenever it changes (server-sent events). A tenant's
/// token is told only when to look again, not the fleet's counts.
#[utoipa::path(get, path = "/stream", tag = "console",
    responses((status = 200, description = "Server-sent `pulse` events: the console's live counts", body = String, content_type = "text/event-stream")))]
pub(super) async fn stream(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let operator = matches!(who, Principal::Operator);
    let shown = move |pulse: &Value| {
        if operator {
            pulse.clone()
        } else {
            json!({"at": pulse["at"], "version": pulse["version"]})
        }
    };
    // The pulse as it is now (once there is one), then each change.
    let events = futures_util::stream::unfold(
        (s.console.pulse.subscribe(), true),
        move |(mut pulses, first)| async move {
            loop {
                if !first || pulses.borrow().is_null() {
                    pulses.changed().await.ok()?;
                }
                let pulse = pulses.borrow_and_update().clone();
                if pulse == CLOSED {
                    return None;
                }
                if !pulse.is_null() {
                    let event = Event::default()
                        .event("pulse")
                        .data(shown(&pulse).to_string());
                    return Some((Ok(event), (pulses, false)));
                }
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct WindowQuery {
    /// `hour` (the default), `day` or `week` (a job's stats only).
    pub(super) window: Option<String>,
}

/// A window's length and its buckets' width.
pub(super) fn window(asked: Option<&str>) -> Result<(&'static str, i64, i64), ApiError> {
    match asked.unwrap_or("hour") {
        "hour" => Ok(("hour", HOUR_MS, 60_000)),
        "day" => Ok(("day", 24 * HOUR_MS, 30 * 60_000)),
        "week" => Ok(("week", 7 * 24 * HOUR_MS, 6 * HOUR_MS)),
        _ => Err(ApiError::invalid("window: use hour, day or week")),
    }
}

const OUTCOMES: [RunStatus; 5] = [
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Crashed,
    RunStatus::Cancelled,
    RunStatus::Skipped,
];

/// `GET /overview?window=hour|day`.
#[utoipa::path(get, path = "/overview", tag = "console", params(WindowQuery),
    responses(
        (status = 200, description = "What the console's overview draws: runs ended by outcome, lanes' depth and lag, failures by job and code. Its shape follows the console's needs", body = Object),
        (status = 400, description = "`invalid_parameter`", body = super::error::ErrorBody)))]
pub(super) async fn overview(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<WindowQuery>,
) -> ApiResult {
    let (name, length, bucket) = window(q.window.as_deref())?;
    let key = format!("overview/{name}/{}", who.tenant().unwrap_or(""));
    let read = read_overview(&s, &who, name, length, bucket);
    Ok(Json(s.console.shared_view(key, read).await?))
}

async fn read_overview(
    s: &Shared,
    who: &Principal,
    name: &str,
    length: i64,
    bucket: i64,
) -> Result<Value, ApiError> {
    let store = &s.app.store;
    let now = store.now().await?;
    let since = now - length;
    let tenant = who.tenant();
    let ended = store.ended_by_bucket(since, bucket, tenant).await?;
    let mut buckets: BTreeMap<i64, BTreeMap<&str, i64>> = BTreeMap::new();
    let first = since / bucket * bucket;
    let mut t = first;
    while t <= now {
        buckets.insert(t, OUTCOMES.iter().map(|o| (o.as_str(), 0)).collect());
        t += bucket;
    }
    for (t, status, n) in ended {
        if let Some(counts) = buckets.get_mut(&t)
            && let Some(count) = counts.get_mut(status.as_str())
        {
            *count += n;
        }
    }
    let buckets = bucket_rows(buckets);
    let failures: Vec<Value> = store
        .failures_by_job(now - HOUR_MS, tenant)
        .await?
        .into_iter()
        .map(|(job, code, count, last)| {
            json!({"job": job, "code": code, "count": count, "last_at": views::time(last)})
        })
        .collect();
    let queues = lane_queues(s, tenant).await?;
    let busy = s.app.runner.interrupts().busy_by_lane();
    let pauses = s.app.runner.pauses().current().await?;
    let history_since = now - length;
    let lanes: Vec<Value> = {
        let samples = s.console.samples();
        queues
            .iter()
            .map(|(lane, queue)| {
                let step = usize::try_from(bucket / SAMPLE_EVERY.as_millis() as i64)
                    .unwrap_or(1)
                    .max(1)
                    / 6;
                // A tenant sees its own queue, never the fleet's workers or history.
                let history: Vec<Value> = samples
                    .iter()
                    .filter(|x| tenant.is_none() && &x.lane == lane && x.at >= history_since)
                    .step_by(step.max(1))
                    .map(|x| json!({"t": views::time(x.at), "depth": x.depth, "lag_ms": x.lag_ms, "busy": x.busy}))
                    .collect();
                let fleet = |n: usize| tenant.is_none().then_some(n);
                json!({
                    "lane": lane,
                    "workers": fleet(s.lanes.get(lane).copied().unwrap_or(0)),
                    "busy": fleet(busy.get(lane).copied().unwrap_or(0)),
                    "depth": queue.depth,
                    "lag_ms": queue.lag_ms,
                    "paused_depth": queue.paused_depth,
                    "paused_lag_ms": queue.paused_lag_ms,
                    "paused": pauses.lane(lane),
                    "history": history,
                })
            })
            .collect()
    };
    // Tenants at their cap on queued runs: their jobs' new runs are refused.
    let full: Vec<Value> = crate::queue::backlog::tenants(store)
        .await?
        .into_iter()
        .filter(|(t, queued, cap)| queued >= cap && who.sees(t))
        .map(|(t, queued, cap)| json!({"tenant": t, "queued": queued, "max_queued": cap}))
        .collect();
    let total: usize = s.lanes.values().sum();
    let busy_total: usize = busy.values().sum();
    let shown_pauses: Vec<Value> = match tenant {
        None => pauses.pauses.iter().map(views::pause).collect(),
        Some(_) => Vec::new(),
    };
    Ok(json!({
        "window": name,
        "bucket_ms": bucket,
        "now": views::time(now),
        "outcomes": OUTCOMES.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
        "buckets": buckets,
        "lanes": lanes,
        "workers": if tenant.is_none() { json!({"busy": busy_total, "total": total}) } else { Value::Null },
        "failures": failures,
        "pauses": shown_pauses,
        "queue_full": full,
    }))
}

/// Buckets as the charts read them: `{"t", <series>: count, ...}` each, in time order.
pub(super) fn bucket_rows<K: AsRef<str>>(buckets: BTreeMap<i64, BTreeMap<K, i64>>) -> Vec<Value> {
    buckets
        .into_iter()
        .map(|(t, counts)| {
            let mut value = json!({ "t": views::time(t) });
            for (series, n) in counts {
                value[series.as_ref()] = n.into();
            }
            value
        })
        .collect()
}

/// The value at quantile `q` of sorted `values`.
fn percentile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted.get(rank.min(sorted.len() - 1)).copied()
}

fn percentiles(mut durations: Vec<i64>) -> Value {
    durations.sort_unstable();
    json!({
        "count": durations.len(),
        "p50": percentile(&durations, 0.50),
        "p95": percentile(&durations, 0.95),
        "p99": percentile(&durations, 0.99),
    })
}

/// `GET /jobs/{name}/stats?window=hour|day|week`.
#[utoipa::path(get, path = "/jobs/{name}/stats", tag = "console",
    params(("name" = String, Path, description = "The job's name"), WindowQuery),
    responses(
        (status = 200, description = "What the console's job page draws: success rate, duration percentiles, next fires. Its shape follows the console's needs", body = Object),
        (status = 400, description = "`invalid_parameter`", body = super::error::ErrorBody),
        (status = 404, description = "`unknown_job`", body = super::error::ErrorBody)))]
pub(super) async fn job_stats(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<WindowQuery>,
) -> ApiResult {
    let job = super::visible::visible_job(&s, &who, &name).await?;
    let (window_name, length, bucket) = window(q.window.as_deref())?;
    let key = format!(
        "job/{}/{window_name}/{}",
        job.name,
        who.tenant().unwrap_or("")
    );
    let read = read_job_stats(&s, &who, job, window_name, length, bucket);
    Ok(Json(s.console.shared_view(key, read).await?))
}

async fn read_job_stats(
    s: &Shared,
    who: &Principal,
    job: crate::store::JobRecord,
    window_name: &str,
    length: i64,
    bucket: i64,
) -> Result<Value, ApiError> {
    let store = &s.app.store;
    let now = store.now().await?;
    let endings = store
        .job_endings(&job.name, now - length, who.tenant(), STATS_ROWS)
        .await?;
    let succeeded = endings
        .iter()
        .filter(|(_, status, _)| status == RunStatus::Succeeded.as_str())
        .count();
    let failed = endings
        .iter()
        .filter(|(_, status, _)| {
            status == RunStatus::Failed.as_str() || status == RunStatus::Crashed.as_str()
        })
        .count();
    let mut by_bucket: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut all = Vec::with_capacity(endings.len());
    for (at, _, duration) in &endings {
        if let Some(ms) = duration {
            by_bucket.entry(at / bucket * bucket).or_default().push(*ms);
            all.push(*ms);
        }
    }
    let durations: Vec<Value> = by_bucket
        .into_iter()
        .map(|(t, values)| {
            let mut value = percentiles(values);
            value["t"] = views::time(t).into();
            value
        })
        .collect();
    let cron = s.catalog.get(&job.name).and_then(|j| j.cron.clone());
    let next_fires: Vec<String> = match (cron, job.next_fire_at) {
        (Some(cron), Some(first)) => std::iter::successors(Some(first), |t| cron.next_after(*t))
            .take(5)
            .map(views::time)
            .collect(),
        _ => Vec::new(),
    };
    let lane = s.catalog.lane_of(&job.name);
    let decided = succeeded + failed;
    Ok(json!({
        "job": job.name,
        "window": window_name,
        "bucket_ms": bucket,
        "runs": endings.len(),
        "sampled": endings.len() as i64 == STATS_ROWS,
        "succeeded": succeeded,
        "failed": failed,
        "success_rate": (decided > 0).then(|| succeeded as f64 / decided as f64),
        "overall": percentiles(all),
        "durations": durations,
        "next_fires": next_fires,
        "lane": lane,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_none_when_empty() {
        let values: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), Some(51));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentiles(vec![7])["p95"], 7);
    }

    #[test]
    fn windows_are_named_and_bucketed() {
        assert_eq!(window(None).unwrap(), ("hour", HOUR_MS, 60_000));
        assert_eq!(window(Some("day")).unwrap().2, 30 * 60_000);
        assert!(window(Some("year")).is_err());
    }
}
