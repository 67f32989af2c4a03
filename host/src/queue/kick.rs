//! Kicks and starts: run a job now, without waiting for any lock, and never lose the
//! request.
//!
//! If a run holds the job's lease, the kick sets the lease's pending flag and the holder
//! queues exactly one follow-up run when it ends, however many kicks arrived meanwhile.
//! Otherwise the kick queues a run. A queued kick that finds the lease taken by the time
//! it runs folds itself into the pending flag instead (see `Runner::skip`).
//!
//! A start means "this work, once": it joins the live run of the job and instance if
//! there is one, or queues one (`Store::enqueue_runs`, atomic across hosts); a start
//! with a unique key follows the unique rule (`rules::enqueue`) instead.
//!
//! A `per_tenant` job's instances are its tenants (`fan_out`): a kick of its default
//! instance kicks every active tenant's child, a kick or start of instance `acme` only
//! acme's.

use crate::rules::enqueue::{Options, Outcome};
use crate::rules::job::JobSpec;
use crate::rules::trace::TraceParent;
use crate::store::enqueue::Enqueueing;
use crate::store::new_run_id;
use crate::store::{JobRecord, NewRun, Origin, RunRecord, Store, StoreError};

pub const DEFAULT_INSTANCE: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Kicked {
    /// A run held the lease: it will run once more when it ends.
    Pending,
    /// A run was queued.
    Queued { run_id: String },
    /// The job already had `max_per_tenant` runs queued or running for the tenant: the
    /// run was recorded skipped with this code, and reported (policy `skip`).
    Dropped {
        run_id: String,
        code: crate::rules::failure::FailureCode,
    },
    /// A per-tenant job's kick: what it did for each active tenant's child.
    FannedOut {
        // A child's kick is never fanned out again: the description stops here.
        #[schema(no_recursion)]
        children: Vec<ChildKick>,
    },
    /// A child of a per-tenant job's kick whose tenant is at a cap on queued runs
    /// (`backlog`): nothing was queued for it.
    QueueFull,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ChildKick {
    pub tenant: String,
    #[serde(flatten)]
    pub kicked: Kicked,
}

/// What a start led to (`result`): a run it created, or the run it joined, replaced or
/// debounced (`rules::enqueue::Outcome`); `joined` is whether it queued nothing new. A
/// created run over its job's `max_per_tenant` with policy `skip` is recorded skipped
/// and reported (`dropped`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Started {
    pub run_id: String,
    pub result: Outcome,
    pub joined: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<crate::rules::failure::FailureCode>,
}

/// One start from outside (the API, `host start`): its instance, its payload (the job's
/// own if none), and its options, read by `rules::enqueue`.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub instance: String,
    pub payload: Option<String>,
    pub options: Options,
}

#[derive(Debug, thiserror::Error)]
pub enum KickError {
    #[error("unknown job {0:?}")]
    UnknownJob(String),
    #[error("the tenant {0:?} is disabled: its jobs take no new runs")]
    TenantDisabled(String),
    #[error("a per-tenant job's instances are its tenants: no registered tenant {0:?}")]
    UnknownTenant(String),
    #[error("the job {0:?} is orphaned: no serving host registered it within the orphan grace")]
    Orphaned(String),
    /// A cap on queued runs (`backlog`) is reached: nothing was queued.
    #[error("{0}: nothing was queued; try again once runs have left the queue")]
    QueueFull(crate::queue::backlog::Full),
    #[error(transparent)]
    Payload(crate::rules::job::JobError),
    /// An option of the start `item` (its place in a batch) its job does not allow.
    #[error("{error}")]
    Option {
        item: usize,
        error: crate::rules::enqueue::OptionError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A kick in the caller's trace (`trace`, if it gave a valid one) or a new one.
pub async fn kick(
    store: &Store,
    job: &str,
    instance: &str,
    trace: Option<TraceParent>,
) -> Result<Kicked, KickError> {
    kick_job(store, &find_job(store, job).await?, instance, trace).await
}

/// A kick of a job whose row the caller has read already. A fanned-out kick's children
/// share its trace.
pub async fn kick_job(
    store: &Store,
    record: &JobRecord,
    instance: &str,
    trace: Option<TraceParent>,
) -> Result<Kicked, KickError> {
    check_runnable(store, record).await?;
    let trace = TraceParent::given_or_start(trace);
    if record.per_tenant == 0 {
        return kick_instance(store, record, instance, &record.tenant, trace).await;
    }
    if instance != DEFAULT_INSTANCE {
        let tenant = child_tenant(store, instance).await?;
        return kick_instance(store, record, instance, &tenant, trace).await;
    }
    let mut children = Vec::new();
    for tenant in store.active_tenants().await? {
        let kicked = match kick_instance(store, record, &tenant, &tenant, trace).await {
            Err(KickError::QueueFull(_)) => Kicked::QueueFull,
            other => other?,
        };
        children.push(ChildKick { tenant, kicked });
    }
    Ok(Kicked::FannedOut { children })
}

/// The tenant whose child of a per-tenant job `instance` names, if it may run.
async fn child_tenant(store: &Store, instance: &str) -> Result<String, KickError> {
    match store.get_tenant(instance).await? {
        None => Err(KickError::UnknownTenant(instance.to_string())),
        Some(t) if t.active == 0 => Err(KickError::TenantDisabled(t.name)),
        Some(t) => Ok(t.name),
    }
}

async fn kick_instance(
    store: &Store,
    record: &JobRecord,
    instance: &str,
    tenant: &str,
    trace: TraceParent,
) -> Result<Kicked, KickError> {
    check_room(store, record, tenant).await?;
    let Some(run) = store
        .kick_run(&new_kick_run(record, instance, tenant, trace))
        .await?
    else {
        return Ok(Kicked::Pending);
    };
    Ok(match dropped(&run) {
        Some(code) => Kicked::Dropped {
            run_id: run.id,
            code,
        },
        None => Kicked::Queued { run_id: run.id },
    })
}

fn dropped(run: &RunRecord) -> Option<crate::rules::failure::FailureCode> {
    run.dropped_by_limit()
        .then_some(crate::rules::failure::FailureCode::TenantLimit)
}

/// Starts `request` of `job`: without a unique key it joins the live run of the job
/// and instance, or queues one; with one, the unique rule answers (`rules::enqueue`). A
/// run it queues is in the caller's trace (`trace`) or a new one; a run it joins keeps
/// its own.
pub async fn start(
    store: &Store,
    job: &str,
    request: StartRequest,
    trace: Option<TraceParent>,
) -> Result<Started, KickError> {
    let record = find_job(store, job).await?;
    let mut started = start_all(store, &record, vec![request], trace).await?;
    Ok(started.pop().expect("one answer a request"))
}

/// Starts `requests` of a job whose row the caller has read already, in one transaction:
/// all, or (a refusal, checked before anything is written) none.
pub async fn start_all(
    store: &Store,
    record: &JobRecord,
    requests: Vec<StartRequest>,
    trace: Option<TraceParent>,
) -> Result<Vec<Started>, KickError> {
    check_runnable(store, record).await?;
    let trace = TraceParent::given_or_start(trace);
    let now = store.now().await?;
    let mut items = Vec::with_capacity(requests.len());
    let mut adding: std::collections::BTreeMap<String, u64> = Default::default();
    let retries = job_retries(record);
    for (item, request) in requests.into_iter().enumerate() {
        request
            .options
            .within_job(retries)
            .map_err(|error| KickError::Option { item, error })?;
        let tenant = match record.per_tenant {
            0 => record.tenant.clone(),
            _ => child_tenant(store, &request.instance).await?,
        };
        let mut run = new_kick_run(record, &request.instance, &tenant, trace);
        if let Some(payload) = &request.payload {
            run.payload =
                crate::rules::job::validate_payload(payload).map_err(KickError::Payload)?;
        }
        run.origin = Origin::Start;
        run.delay_ms = request.options.claim_delay_ms(now);
        // A start that would join its live run queues nothing, so it takes no room.
        let unique = request.options.unique;
        if unique.is_some() || store.live_run(&run.job, &run.instance).await?.is_none() {
            *adding.entry(tenant).or_default() += 1;
        }
        items.push(Enqueueing {
            run,
            unique,
            max_attempts: request.options.max_attempts,
        });
    }
    for (tenant, count) in adding {
        let caps = crate::queue::backlog::caps_of(record, &tenant);
        crate::queue::backlog::room(store, &record.name, &tenant, caps, count, count)
            .await?
            .map_err(KickError::QueueFull)?;
    }
    let answers = store.enqueue_runs(&items).await?;
    Ok(answers
        .into_iter()
        .map(|a| Started {
            joined: a.outcome != Outcome::Created,
            dropped: a
                .dropped
                .then_some(crate::rules::failure::FailureCode::TenantLimit),
            result: a.outcome,
            run_id: a.run_id,
        })
        .collect())
}

/// Refuses a new run of `record` for `tenant` over a cap on queued runs.
async fn check_room(store: &Store, record: &JobRecord, tenant: &str) -> Result<(), KickError> {
    let caps = crate::queue::backlog::caps_of(record, tenant);
    crate::queue::backlog::room(store, &record.name, tenant, caps, 1, 1)
        .await?
        .map_err(KickError::QueueFull)
}

async fn find_job(store: &Store, job: &str) -> Result<JobRecord, KickError> {
    store
        .get_job(job)
        .await?
        .ok_or_else(|| KickError::UnknownJob(job.to_string()))
}

/// Whether the job takes new runs: not orphaned, and its tenant not disabled.
async fn check_runnable(store: &Store, record: &JobRecord) -> Result<(), KickError> {
    if record.orphaned_at.is_some() {
        return Err(KickError::Orphaned(record.name.clone()));
    }
    if tenant_disabled(store, &record.tenant).await? {
        return Err(KickError::TenantDisabled(record.tenant.clone()));
    }
    Ok(())
}

/// A tenant that is not registered (the operator's own) is never disabled.
async fn tenant_disabled(store: &Store, tenant: &str) -> Result<bool, StoreError> {
    Ok(store
        .get_tenant(tenant)
        .await?
        .is_some_and(|t| t.active == 0))
}

fn new_kick_run(record: &JobRecord, instance: &str, tenant: &str, trace: TraceParent) -> NewRun {
    kick_run(
        &record.name,
        instance,
        tenant,
        job_payload(record),
        Some(trace),
    )
}

/// The job's `retries` as registered; an unreadable definition allows none (a start
/// then may not ask for more than one attempt).
pub fn job_retries(record: &JobRecord) -> u32 {
    serde_json::from_str::<JobSpec>(&record.spec).map_or(0, |spec| spec.retry.retries)
}

/// The payload a kick of the job queues its run with: its definition's.
pub fn job_payload(record: &JobRecord) -> String {
    serde_json::from_str::<JobSpec>(&record.spec)
        .map(|spec| spec.payload.to_string())
        .unwrap_or_else(|_| "{}".into())
}

/// Queues the run a `run_on_boot` job's new version owes (one per active tenant for a
/// per-tenant job), once fleet-wide: the first registration of the version takes it. A
/// disabled tenant's job owes it still: the first registration after it is enabled again
/// (a host's start, a reloaded component) takes it.
pub async fn boot(store: &Store, spec: &JobSpec, digest: &str) -> Result<bool, StoreError> {
    if !spec.per_tenant && tenant_disabled(store, &spec.tenant).await? {
        return Ok(false);
    }
    let occasion = format!("boot:{digest}");
    let mut template = kick_run(
        &spec.name,
        DEFAULT_INSTANCE,
        &spec.tenant,
        spec.payload.to_string(),
        Some(TraceParent::start()),
    );
    template.origin = Origin::Boot;
    template.id = crate::queue::fan_out::child_id(&spec.name, &occasion, &spec.tenant);
    let runs = if spec.per_tenant {
        let tenants = store.active_tenants().await?;
        crate::queue::fan_out::children(&template, &occasion, &tenants)
    } else {
        vec![template]
    };
    store.boot_once(&spec.name, digest, &runs).await
}

/// The run queued after `run` ends, if kicks arrived while it held the lease: a kick
/// of the same job and instance, with the job's payload. The kicks' own traces were
/// folded into a flag: its trace derives from its id.
pub fn follow_up(run: &RunRecord, payload: String) -> NewRun {
    kick_run(&run.job, &run.instance, &run.tenant, payload, None)
}

fn kick_run(
    job: &str,
    instance: &str,
    tenant: &str,
    payload: String,
    trace: Option<TraceParent>,
) -> NewRun {
    NewRun {
        id: new_run_id(),
        job: job.to_string(),
        instance: instance.to_string(),
        tenant: tenant.to_string(),
        origin: Origin::Kick,
        payload,
        cursor: None,
        component_digest: None,
        scheduled_for: None,
        rerun_of: None,
        delay_ms: 0,
        trace_parent: trace,
    }
}
