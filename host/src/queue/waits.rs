//! Why a queued run waits, in the words people see (`host runs show`, `GET /runs/{id}`,
//! the console): computed on read from what holds it now — a pause, its tenant's quota,
//! its job's component still compiling, its job's `max_per_tenant`, a claim limit — never
//! stored per claim, so it cannot go stale or cost the claim a write.

use crate::queue::pause::PauseSet;
use crate::store::{RunRecord, Store, StoreError};

/// What holds a queued run back, first match wins: a pause of its job, tenant or lane;
/// its tenant over a `wait` quota; its job's component compiling on a serving host (no
/// host claims a run before it can run it, so its deadline has not begun); a
/// `max_per_tenant` slot it waits for; then the claim
/// limits (`jobhost_held_back`): `concurrency` (or `sequential`), `rate`, `key`.
pub async fn why_waiting(
    store: &Store,
    pauses: &PauseSet,
    over_quota: &[String],
    run: &RunRecord,
) -> Result<Option<String>, StoreError> {
    if run.shown_status() != "queued" {
        return Ok(None);
    }
    let lane = match store.get_job(&run.job).await? {
        Some(job) => serde_json::from_str::<crate::rules::job::JobSpec>(&job.spec)
            .map(|spec| spec.lane)
            .unwrap_or_else(|_| crate::rules::job::DEFAULT_LANE.to_string()),
        None => crate::rules::job::DEFAULT_LANE.to_string(),
    };
    if !pauses.holding(&run.job, &run.tenant, &lane).is_empty() {
        return Ok(Some("paused".into()));
    }
    if over_quota.contains(&run.tenant) {
        return Ok(Some("quota".into()));
    }
    if store.job_compiling(&run.job).await? {
        return Ok(Some("compiling".into()));
    }
    Ok(match store.run_hold(&run.id).await? {
        Some((true, _)) => Some("tenant cap".into()),
        Some((false, held)) => held,
        None => None,
    })
}
