//! Named events: `POST /events/{name}` or `host emit` queues one run of each job that
//! subscribes to the event (`on = ["invoice.created"]`), at least once and never twice
//! for one dedup key.
//!
//! A subscription may filter on the event's payload (`event_filter`): only an event whose
//! payload matches queues the job's run. An orphaned job is reached by no event.
//!
//! Who receives an event: an event without a tenant (the operator's) reaches every
//! subscriber of an active tenant, and every active tenant's child of a per-tenant
//! subscriber; an event of tenant `acme` (every event a tenant's token emits) reaches only
//! acme's subscribers and acme's child of a per-tenant one.
//!
//! Each run's id is derived from the event, its tenant, its key, the job and the run's
//! tenant (`fan_out::child_id`), and all of an event's runs are inserted in one
//! transaction that leaves ids already present alone: an emit that is retried, or raced
//! by another host, queues nothing twice, and an emit that answered has queued them all.
//! Each run's instance is the event and a digest of its tenant, its key and the run's
//! tenant, so runs of different events (or of one event for different tenants of a
//! per-tenant job) never wait on each other's lease.

use crate::rules::event_name::{InvalidEventName, validate_event};
use crate::rules::job::JobSpec;
use crate::store::{NewRun, Origin, Store, StoreError};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Longest dedup key.
pub const MAX_KEY: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Name(#[from] InvalidEventName),
    #[error("a dedup key is 1-{MAX_KEY} bytes without control characters")]
    Key,
    #[error(transparent)]
    Payload(crate::rules::job::JobError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One run an event queued, or had queued before (`duplicate`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct EventRun {
    pub job: String,
    pub tenant: String,
    pub run_id: String,
    pub duplicate: bool,
}

fn validate_key(key: &str) -> Result<(), EmitError> {
    let ok = crate::rules::name_rule::is_name(key, MAX_KEY);
    ok.then_some(()).ok_or(EmitError::Key)
}

/// Queues the runs of event `name` with dedup `key`, of `tenant` (`None`: the
/// operator's), with `payload` (each job's own if none is given), all in the caller's
/// trace (`trace`, if it gave a valid one) or one new trace.
pub async fn emit(
    store: &Store,
    name: &str,
    key: &str,
    tenant: Option<&str>,
    payload: Option<&str>,
    trace: Option<crate::rules::trace::TraceParent>,
) -> Result<Vec<EventRun>, EmitError> {
    validate_event(name)?;
    validate_key(key)?;
    let trace = crate::rules::trace::TraceParent::given_or_start(trace);
    let payload = payload
        .map(crate::rules::job::validate_payload)
        .transpose()
        .map_err(EmitError::Payload)?;
    let runs = event_runs(store, name, key, tenant, payload.as_deref(), Some(trace)).await?;
    let inserted = store.insert_runs_once(&runs).await?;
    Ok(runs
        .into_iter()
        .zip(inserted)
        .map(|(run, inserted)| EventRun {
            job: run.job,
            tenant: run.tenant,
            run_id: run.id,
            duplicate: !inserted,
        })
        .collect())
}

/// The runs event `name` with dedup `key` of `tenant` queues (see the module's rules):
/// `payload` is checked by the caller. Shared by `emit` and a guest's `jobs.emit`, which
/// queues them in its own (fenced) write.
pub async fn event_runs(
    store: &Store,
    name: &str,
    key: &str,
    tenant: Option<&str>,
    payload: Option<&str>,
    trace: Option<crate::rules::trace::TraceParent>,
) -> Result<Vec<NewRun>, StoreError> {
    let (active, disabled): (Vec<_>, Vec<_>) = store
        .list_tenants()
        .await?
        .into_iter()
        .partition(|t| t.active != 0);
    let active: Vec<String> = active.into_iter().map(|t| t.name).collect();
    let disabled: HashSet<String> = disabled.into_iter().map(|t| t.name).collect();
    // What payload filters read; an event without a payload matches none.
    let event_payload: Option<serde_json::Value> =
        payload.and_then(|p| serde_json::from_str(p).ok());
    let occasion = format!("event:{name}:{}:{key}", tenant.unwrap_or("*"));
    let mut runs = Vec::new();
    for job in store.list_jobs().await? {
        // An orphaned job takes no new runs, as a kick of it is refused.
        if job.orphaned_at.is_some() {
            continue;
        }
        let Ok(spec) = serde_json::from_str::<JobSpec>(&job.spec) else {
            continue;
        };
        if !spec.on.contains(name) {
            continue;
        }
        if let Some(filter) = spec.on_where.get(name)
            && !event_payload.as_ref().is_some_and(|p| filter.matches(p))
        {
            continue;
        }
        let tenants: Vec<String> = match (spec.per_tenant, tenant) {
            (true, None) => active.clone(),
            (true, Some(t)) => active.iter().filter(|a| *a == t).cloned().collect(),
            (false, Some(t)) if spec.tenant != t => Vec::new(),
            (false, _) if disabled.contains(&spec.tenant) => Vec::new(),
            (false, _) => vec![spec.tenant.clone()],
        };
        for run_tenant in tenants {
            runs.push(NewRun {
                id: crate::queue::fan_out::child_id(&spec.name, &occasion, &run_tenant),
                job: spec.name.clone(),
                instance: instance(&occasion, name, &run_tenant),
                tenant: run_tenant,
                origin: Origin::Event,
                payload: payload
                    .map(str::to_string)
                    .unwrap_or_else(|| spec.payload.to_string()),
                cursor: None,
                component_digest: None,
                scheduled_for: None,
                rerun_of: None,
                delay_ms: 0,
                trace_parent: trace,
            });
        }
    }
    Ok(runs)
}

/// The instance of an event's run for `run_tenant`: the event's name and a digest of the
/// occasion (event, tenant, key) and the run's tenant.
fn instance(occasion: &str, name: &str, run_tenant: &str) -> String {
    let digest = Sha256::digest(format!("{occasion}\0{run_tenant}").as_bytes());
    format!("{name}:{}", hex::encode(&digest[..6]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_checked() {
        assert!(validate_event("invoice.created").is_ok());
        for bad in ["", "Invoice", "a b", "a/b", "\u{1b}[2J"] {
            assert!(validate_event(bad).is_err(), "{bad:?}");
        }
        assert!(validate_key("inv-7").is_ok());
        for bad in [
            String::new(),
            "a\nb".into(),
            "\0".into(),
            "a\u{2060}b".into(),
            "k".repeat(MAX_KEY + 1),
        ] {
            assert!(validate_key(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_instance_is_per_occasion_and_run_tenant_and_fits_the_instance_rule() {
        let a = instance("event:e:*:k1", "e", "acme");
        assert_eq!(a, instance("event:e:*:k1", "e", "acme"));
        assert_ne!(a, instance("event:e:*:k1", "e", "globex"));
        assert_ne!(a, instance("event:e:*:k2", "e", "acme"));
        assert!(a.starts_with("e:"));
        let longest = instance(&"k".repeat(400), &"e".repeat(64), &"t".repeat(64));
        assert!(crate::rules::job::validate_instance(&longest).is_ok());
    }
}
