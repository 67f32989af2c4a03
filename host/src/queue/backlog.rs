//! Bounded queues: how many runs a tenant, and a job for one tenant, may have queued, and
//! how deep a family may grow (child of child of ...). The one place these are decided;
//! the guest's `jobs` calls (`capability::jobs`) and the API's and CLI's kicks and starts
//! (`kick`) ask here before they queue.
//!
//! Queued means waiting for a worker, whatever for: due, delayed, retrying after a
//! failure, deferred, waiting for a slot of `max_per_tenant`, or a parent waiting for its
//! children (every run whose row says `queued`); a running run is not counted. The caps
//! are the manifest's (`max_queued` of a job, of `[tenants.NAME]` or `[tenant_defaults]`)
//! and are stored with each job's definition, so every host, and `host start` without a
//! manifest, applies the same ones.
//!
//! The count is read just before the write, not under a lock: two writers that both read
//! room both queue, so a cap may be passed by what is being queued at that moment across
//! the fleet: what the attempts running then queue (one call each, at most 1 000 runs; a
//! run queued inside a transaction is counted once it commits, so up to the attempt's
//! 10 000), and one run per kick or start in flight. On SQLite as on Postgres: the count
//! is a read beside the write. No lock is taken, so a guest's open transaction never holds
//! up another writer, and the claim path is untouched.

use crate::rules::queue_caps::Caps;
use crate::store::{JobRecord, Store, StoreError};

/// The deepest a run may be in its family: a run a guest started is one deeper than the
/// run that started it, and one started otherwise (a kick, a schedule) is at depth 0.
pub const MAX_FAMILY_DEPTH: i64 = 16;

/// Why runs were not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("tenant {tenant:?} has {cap} runs queued, its max_queued")]
    Tenant { tenant: String, cap: u64 },
    #[error("job {job:?} has {cap} runs queued for tenant {tenant:?}, its max_queued")]
    Job {
        job: String,
        tenant: String,
        cap: u64,
    },
}

/// The caps new runs of the job `record` for `tenant` are queued under, from its stored
/// definition (one registered before the caps existed has the defaults).
pub fn caps_of(record: &JobRecord, tenant: &str) -> Caps {
    serde_json::from_str::<crate::rules::job::JobSpec>(&record.spec)
        .map(|spec| spec.flow)
        .unwrap_or_default()
        .queue_caps(tenant)
}

/// Whether `adding` more runs of `job` for `tenant` (and `adding_in_tenant` of the
/// tenant's, these among them) fit under `caps`: `Err` names the cap they would pass.
pub async fn room(
    store: &Store,
    job: &str,
    tenant: &str,
    caps: Caps,
    adding: u64,
    adding_in_tenant: u64,
) -> Result<Result<(), Full>, StoreError> {
    let (in_tenant, in_job) = store
        .queued_counts(tenant, job, caps.tenant, caps.job)
        .await?;
    let over = |count: i64, adding: u64, cap: u64| u64::try_from(count).unwrap_or(0) + adding > cap;
    Ok(if over(in_tenant, adding_in_tenant, caps.tenant) {
        Err(Full::Tenant {
            tenant: tenant.to_string(),
            cap: caps.tenant,
        })
    } else if over(in_job, adding, caps.job) {
        Err(Full::Job {
            job: job.to_string(),
            tenant: tenant.to_string(),
            cap: caps.job,
        })
    } else {
        Ok(())
    })
}

/// Each tenant with queued runs: how many, and its cap as the jobs registered last set
/// it (metrics, the console).
pub async fn tenants(store: &Store) -> Result<Vec<(String, u64, u64)>, StoreError> {
    let caps = store
        .list_jobs()
        .await?
        .into_iter()
        .max_by_key(|j| j.updated_at)
        .and_then(|j| serde_json::from_str::<crate::rules::job::JobSpec>(&j.spec).ok())
        .map(|spec| spec.flow.tenant_queued)
        .unwrap_or_default();
    Ok(store
        .queued_by_tenant()
        .await?
        .into_iter()
        .map(|(tenant, queued)| {
            let cap = caps.of(&tenant);
            (tenant, u64::try_from(queued).unwrap_or(0), cap)
        })
        .collect())
}
