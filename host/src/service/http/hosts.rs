//! The hosts' heartbeats: every serving host writes one every [`HEARTBEAT`] (its version,
//! its lanes with their workers and how many are busy), and `GET /hosts` shows who is
//! alive (`views::hosts`) to operators; to a tenant's token the path does not exist.

use super::error::{ApiError, ErrorBody};
use super::state::Shared;
use super::visible::operator_only;
use crate::rules::tenant::Principal;
use crate::service::views::{self, HEARTBEAT, HOSTS_SHOWN, HostList};
use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::watch;

/// How long a host no longer seen stays listed.
const FORGET_MS: i64 = 24 * 3_600_000;

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
    let store = &s.app.store;
    let now = store.now().await?;
    let records = store.list_hosts(HOSTS_SHOWN).await?;
    Ok(Json(views::hosts(
        &records,
        now,
        Some(s.app.runner.host_id()),
    )))
}
