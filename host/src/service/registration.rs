//! Which jobs the fleet serves. Each serving host registers the jobs its manifest names
//! when it starts and every quarter of its orphan grace after; a job that no host
//! registered (and no `host run` upserted) within the grace is orphaned — not scheduled,
//! kicked, started or reached by events — and, registered again, restored. The grace
//! decides rather than the manifest of whichever host started last, so a fleet rolling a
//! new manifest out host by host never orphans a job that hosts not yet restarted serve.
//!
//! An orphaned job's runs that wait — queued, retrying, delayed, a next pass holding its
//! lease parked, a parent waiting for its children — would wait for ever: no host claims
//! them. Each beat ends them `skipped` with code `orphaned`, one report per run (as any
//! run's end is reported), releasing a lease one held; retention then deletes them like
//! any ended run, and the job after them. A `host run`'s queued run is left to its
//! process. Restored, a job takes new runs; the ended ones stay ended.

use crate::rules::failure::FailureCode;
use crate::store::{NewReport, OrphanEnding, ReportKind, RunStatus, Store, StoreError};
use std::time::Duration;

/// How long a job may go unregistered before it is orphaned: a few of the beats that
/// register it, so a host restarting or a slow database round trip never orphans what a
/// live host serves. Every host of a fleet should use the same (`host serve
/// --orphan-grace`).
pub const ORPHAN_GRACE: Duration = Duration::from_secs(60);

/// How often a serving host registers its jobs: four beats per grace.
pub fn beat_interval(grace: Duration) -> Duration {
    grace / 4
}

/// Waiting runs of orphaned jobs one beat ends (in transactions of
/// `controls::BATCH`); the rest wait for the next.
const ORPHANED_RUNS_PER_BEAT: i64 = 1000;

/// What one beat did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// Jobs it orphaned.
    pub orphaned: u64,
    /// Waiting runs of orphaned jobs it ended.
    pub ended: usize,
}

/// One beat: registers `serving` (restoring any of them that was orphaned), orphans what
/// nothing registered within `grace`, and ends the runs waiting in orphaned jobs' queues.
pub async fn beat(store: &Store, serving: &[String], grace: Duration) -> Result<Beat, StoreError> {
    store.serve_jobs(serving).await?;
    let orphaned = store.mark_orphans(grace).await?;
    let ended = end_orphaned_runs(store).await?;
    Ok(Beat { orphaned, ended })
}

/// Ends runs waiting in orphaned jobs' queues: `skipped`, `orphaned`, each reported.
async fn end_orphaned_runs(store: &Store) -> Result<usize, StoreError> {
    let code = FailureCode::Orphaned;
    let runs = store.orphaned_waiting_runs(ORPHANED_RUNS_PER_BEAT).await?;
    let mut ended = 0;
    for batch in runs.chunks(crate::runs::controls::BATCH) {
        let endings: Vec<OrphanEnding<'_>> = batch
            .iter()
            .map(|run| OrphanEnding {
                run,
                status: RunStatus::Skipped.as_str(),
                code: code.as_str(),
                report: NewReport::about_run(ReportKind::RunFailed, run, code),
            })
            .collect();
        for run in store.end_orphaned_runs(&endings).await?.iter().flatten() {
            ended += 1;
            tracing::info!(job = %run.job, run_id = %run.id, tenant = %run.tenant, code = code.as_str(), "run ended: its job is orphaned");
        }
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::JobUpsert;

    async fn register(store: &Store, name: &str) {
        store
            .upsert_job(&JobUpsert {
                name,
                tenant: "default",
                component_path: "x.wasm",
                component_digest: "d",
                spec: "{}",
                schedule: None,
                next_fire_at: None,
                per_tenant: false,
                sequential: false,
                max_per_tenant: None,
                over_limit: crate::rules::job::OverLimit::Skip,
                limits: &Default::default(),
            })
            .await
            .unwrap();
    }

    async fn orphans(store: &Store) -> Vec<String> {
        let jobs = store.list_jobs().await.unwrap();
        jobs.into_iter()
            .filter(|j| j.orphaned_at.is_some())
            .map(|j| j.name)
            .collect()
    }

    #[tokio::test]
    async fn only_what_no_host_registered_within_the_grace_is_orphaned_until_registered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/db", dir.path().display()))
            .await
            .unwrap();
        let grace = Duration::from_millis(300);
        for name in ["a", "b", "gone"] {
            register(&store, name).await;
        }
        // Host A serves `a`, host B `b`: within the grace nothing is orphaned, whoever
        // beats, even a host that serves none of them.
        assert_eq!(
            beat(&store, &["a".into()], grace).await.unwrap(),
            Beat::default()
        );
        assert_eq!(beat(&store, &[], grace).await.unwrap(), Beat::default());
        for _ in 0..4 {
            tokio::time::sleep(grace / 3).await;
            beat(&store, &["a".into()], grace).await.unwrap();
            beat(&store, &["b".into()], grace).await.unwrap();
        }
        assert_eq!(orphans(&store).await, ["gone"]);
        // Registered again, it is restored.
        beat(&store, &["gone".into()], grace).await.unwrap();
        assert!(orphans(&store).await.is_empty());
        assert!(beat_interval(ORPHAN_GRACE) * 3 < ORPHAN_GRACE);
    }
}
