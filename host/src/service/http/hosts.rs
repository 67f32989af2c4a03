//! The hosts' heartbeats: every serving host writes one every [`HEARTBEAT`] (its version,
//! its lanes with their workers and how many are busy), and `GET /hosts` shows who is
//! alive — seen within [`ALIVE_BEATS`] beats — to operators; to a tenant's token the path
//! does not exist.

use super::error::{ApiError, ErrorBody};
use super::state::Shared;
use super::visible::operator_only;
use crate::rules::tenant::Principal;
use crate::service::views;
use axum::Json;
use axum::extract::{Extension, State};
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use utoipa::ToSchema;

/// How often a serving host writes its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// A host missing this many beats in a row is not alive: one slow write is not a death.
const ALIVE_BEATS: i64 = 3;
/// How long a host no longer seen stays listed.
const FORGET_MS: i64 = 24 * 3_600_000;
/// Most hosts listed: a fleet, not a crowd.
const HOSTS_SHOWN: i64 = 200;

/// Writes this host's heartbeat every [`HEARTBEAT`] until `stop`, then marks it stopped.
pub async fn heartbeat_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let host = shared.app.runner.host_id().to_string();
    let mut first = true;
    loop {
        let busy = shared.app.runner.interrupts().busy_by_lane();
        let lanes: Vec<Value> = shared
            .lanes
            .iter()
            .map(|(lane, workers)| {
                json!({"lane": lane, "workers": workers, "busy": busy.get(lane).copied().unwrap_or(0)})
            })
            .collect();
        let lanes = Value::from(lanes).to_string();
        let version = env!("CARGO_PKG_VERSION");
        match shared
            .app
            .store
            .beat_host(&host, version, &lanes, first, FORGET_MS)
            .await
        {
            Ok(()) => first = false,
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "writing the heartbeat failed")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(HEARTBEAT) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    if let Err(e) = shared.app.store.host_stopped(&host).await {
        tracing::warn!(code = "driver_failed", error = %e, "marking the host stopped failed");
    }
}

/// `GET /hosts`.
#[derive(Serialize, ToSchema)]
pub(super) struct HostList {
    hosts: Vec<HostView>,
    heartbeat_ms: i64,
    /// The database's time, which `seen_at` is compared with.
    now: String,
}

/// A host as its heartbeats tell it.
#[derive(Serialize, ToSchema)]
pub(super) struct HostView {
    host: String,
    /// `alive` (seen within 3 beats), `silent` or `stopped`.
    state: &'static str,
    alive: bool,
    version: String,
    /// Its lanes as it wrote them: `lane`, `workers`, `busy` each.
    #[schema(value_type = Vec<Object>)]
    lanes: Vec<Value>,
    workers: Workers,
    started_at: String,
    seen_at: String,
    stopped_at: Option<String>,
    /// It is the host that answers.
    this_host: bool,
}

/// A host's workers over all its lanes.
#[derive(Serialize, ToSchema)]
pub(super) struct Workers {
    busy: u64,
    total: u64,
}

/// `GET /hosts`: every host seen in the last day, by id, with whether it is alive.
#[utoipa::path(get, path = "/hosts", tag = "console",
    responses(
        (status = 200, description = "Every host seen in the last day", body = HostList),
        (status = 404, description = "`not_found`: a tenant's token", body = ErrorBody)))]
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(who): Extension<Principal>,
) -> Result<Json<HostList>, ApiError> {
    operator_only(&who)?;
    let now = s.app.store.now().await?;
    let alive_after = now - ALIVE_BEATS * HEARTBEAT.as_millis() as i64;
    let hosts = s
        .app
        .store
        .list_hosts(HOSTS_SHOWN)
        .await?
        .iter()
        .map(|h| {
            let lanes: Vec<Value> = serde_json::from_str(&h.lanes).unwrap_or_default();
            let sum = |key: &str| lanes.iter().filter_map(|l| l[key].as_u64()).sum::<u64>();
            let state = match h.stopped_at {
                Some(_) => "stopped",
                None if h.seen_at >= alive_after => "alive",
                None => "silent",
            };
            HostView {
                host: h.host_id.clone(),
                state,
                alive: state == "alive",
                version: h.version.clone(),
                workers: Workers {
                    busy: sum("busy"),
                    total: sum("workers"),
                },
                lanes,
                started_at: views::time(h.started_at),
                seen_at: views::time(h.seen_at),
                stopped_at: h.stopped_at.map(views::time),
                this_host: h.host_id == s.app.runner.host_id(),
            }
        })
        .collect();
    Ok(Json(HostList {
        hosts,
        heartbeat_ms: HEARTBEAT.as_millis() as i64,
        now: views::time(now),
    }))
}
