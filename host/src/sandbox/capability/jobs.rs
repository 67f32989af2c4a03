//! `jobhost:job/jobs`: a guest starts runs of other jobs (enqueue, start, kick, emit) and
//! has a pass wait for them. This only translates and checks: the grant (checked at load,
//! and here at each call), the target job's tenant, the payload rule, the options (by
//! `rules::enqueue`, as an API start's), the per-attempt bounds, and the ids that make a
//! retried pass start nothing twice. An earlier guest's `dedup-key` is a unique key that
//! holds for good, so every key goes through the one unique rule. The rows are
//! `store::family`'s; what a wait leads to is the runner's and `crate::runs::family`'s.

use crate::rules::enqueue::{Asked, OnConflict, Outcome, Unique, While};
use crate::rules::grants::Grants;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::handles::TxHandle;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::jobs::{
    Enqueued, Hold, Host, NewRun as WitNewRun, NewStart, OnConflict as WitOnConflict, Options,
    Outcome as WitOutcome, StartOptions, Started, WaitPolicy,
};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::refusal;
use crate::store::enqueue::EnqueueAnswer;
use crate::store::family::{ChildRun, Enqueue, ParentLink};
use crate::store::guest::{Applied, Fence, GuestDbError, TxEffect};
use crate::store::{JobRecord, Store};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use wasmtime::component::Resource;

/// Most runs one attempt may start (enqueued, kicked, or queued by its emits).
pub const MAX_RUNS_PER_ATTEMPT: usize = 10_000;
/// Most payload bytes the runs one attempt starts may carry together.
pub const MAX_PAYLOAD_BYTES_PER_ATTEMPT: usize = 32 << 20;
/// The bounds an enqueue's options share with the API's (`rules::enqueue`).
pub use crate::rules::enqueue::{MAX_BATCH, MAX_DELAY_MS, MAX_KEY_BYTES, MAX_PRIORITY_S};

/// What one attempt's `jobs` calls belong to.
pub struct JobsSession {
    pub store: Store,
    pub fence: Fence,
    pub parent: ParentLink,
    pub tenant: String,
    pub grants: Arc<Grants>,
    pub trace: String,
}

impl JobsSession {
    /// The runs `cx`'s attempt may start, if its job was granted `jobs`.
    pub fn for_attempt(cx: &AttemptContext) -> Option<JobsSession> {
        cx.spec.grants.jobs.as_ref()?;
        Some(JobsSession {
            store: cx.host.store.clone(),
            fence: cx.fence(),
            parent: ParentLink {
                run_id: cx.run.id.clone(),
                generation: cx.lease.generation,
                pass: cx.run.pass,
                attempt: cx.attempt,
            },
            tenant: cx.run.tenant.clone(),
            grants: Arc::new(cx.spec.grants.clone()),
            trace: cx.run.trace().to_string(),
        })
    }
}

/// The `jobs` capability's per-attempt state: `None` when the job was not granted it.
pub struct JobsCapability {
    session: Option<JobsSession>,
    started: usize,
    payload_bytes: usize,
    /// Calls that started runs so far: the n-th call of every attempt of a pass names
    /// the same runs, so a retried pass that repeats its calls starts nothing twice.
    calls: u64,
    /// The jobs this attempt looked up, by name (`None`: unknown or orphaned).
    targets: HashMap<String, Option<JobRecord>>,
    /// How many ancestors the attempt's run has, once read.
    depth: Option<i64>,
}

impl JobsCapability {
    pub fn new(session: Option<JobsSession>) -> Self {
        JobsCapability {
            session,
            started: 0,
            payload_bytes: 0,
            calls: 0,
            targets: HashMap::new(),
            depth: None,
        }
    }
}

fn invalid(reason: &str) -> HostError {
    HostError::Invalid(reason.into())
}

/// A payload by the payload rule, canonical; refused with the rule's reason.
fn checked_payload(text: &str) -> Result<String, HostError> {
    crate::rules::json_rule::canonical(text.as_bytes(), crate::rules::json_rule::PAYLOAD)
        .map_err(|refusal| invalid(refusal.code()))
}

/// A run a `jobs` call asks for, whichever its function: an earlier `options` or a
/// `start-options`.
#[derive(Debug, Clone)]
struct Asking {
    job: String,
    payload: String,
    instance: Option<String>,
    asked: Asked,
    detached: bool,
    /// An earlier guest's dedup key, which names the run's id.
    dedup_key: Option<String>,
}

impl Asking {
    fn of_enqueue(run: WitNewRun) -> Asking {
        let Options {
            instance,
            delay_ms,
            priority,
            dedup_key,
            detached,
        } = run.options;
        Asking {
            job: run.job,
            payload: run.payload,
            instance,
            asked: Asked {
                run_at: None,
                delay_ms,
                priority,
                max_attempts: None,
                unique: dedup_key.clone().map(|key| Unique {
                    key,
                    hold: While::Forever,
                    on_conflict: OnConflict::Keep,
                }),
            },
            detached,
            dedup_key,
        }
    }

    fn of_start(run: NewStart) -> Asking {
        let StartOptions {
            instance,
            run_at,
            delay_ms,
            priority,
            max_attempts,
            unique,
            detached,
        } = run.options;
        Asking {
            job: run.job,
            payload: run.payload,
            instance,
            asked: Asked {
                run_at,
                delay_ms,
                priority,
                max_attempts,
                unique: unique.map(|u| Unique {
                    key: u.key,
                    hold: match u.hold {
                        Hold::Queued => While::Queued,
                        Hold::Active => While::Active,
                        Hold::UntilFinished => While::UntilFinished,
                        // Out of `i64`'s range is past the bound, refused as such.
                        Hold::Period(ms) => While::Period(i64::try_from(ms).unwrap_or(i64::MAX)),
                    },
                    on_conflict: match u.on_conflict {
                        WitOnConflict::Keep => OnConflict::Keep,
                        WitOnConflict::Replace => OnConflict::Replace,
                        WitOnConflict::Debounce => OnConflict::Debounce,
                    },
                }),
            },
            detached,
            dedup_key: None,
        }
    }
}

/// A child's id: from its dedup key (one run per job, tenant and key, for good), or from
/// the parent's pass, the call's place in it, and what the call asked for.
fn child_id(parent: &ParentLink, tenant: &str, call: u64, index: usize, run: &Asking) -> String {
    let occasion = match &run.dedup_key {
        Some(key) => format!("key:{key}"),
        None => {
            let asked = Sha256::digest(
                format!("{}\0{}\0{:?}", run.job, run.payload, run.instance).as_bytes(),
            );
            format!(
                "child:{}:{}:{call}:{index}:{}",
                parent.run_id,
                parent.pass,
                hex::encode(&asked[..8])
            )
        }
    };
    crate::queue::fan_out::child_id(&run.job, &occasion, tenant)
}

impl View<'_, JobsCapability> {
    fn jobs_session(&mut self) -> Result<&JobsSession, HostError> {
        if self.own.session.is_none() {
            return Err(self.refuse("not-granted"));
        }
        Ok(self.own.session.as_ref().expect("checked above"))
    }

    fn refuse(&mut self, reason: &str) -> HostError {
        let grant = self
            .own
            .session
            .as_ref()
            .and_then(|s| s.grants.jobs.as_ref());
        let refused = match grant {
            None => refusal::capability_not_granted("jobs"),
            Some(grant) => refusal::start(reason, Some(grant)),
        };
        self.attempt.signals.refuse(refused);
        HostError::CapabilityRefused(reason.into())
    }

    fn over_limit(&mut self) -> HostError {
        self.attempt.signals.refuse(refusal::run_limit(
            MAX_RUNS_PER_ATTEMPT,
            MAX_PAYLOAD_BYTES_PER_ATTEMPT,
        ));
        invalid("run-limit")
    }

    /// The job `name` as this attempt may start it: granted, known, not orphaned, and
    /// runnable by the run's tenant (its own job, or a per-tenant job).
    async fn target(&mut self, name: &str) -> Result<JobRecord, HostError> {
        let session = self.jobs_session()?;
        if !session.grants.may_start(name) {
            return Err(self.refuse("job-not-granted"));
        }
        let (store, tenant) = (session.store.clone(), session.tenant.clone());
        if !self.own.targets.contains_key(name) {
            let record = match store.get_job(name).await {
                Ok(record) => record.filter(|r| r.orphaned_at.is_none()),
                Err(_) => {
                    self.attempt.signals.unavailable = true;
                    return Err(HostError::Unavailable);
                }
            };
            self.own.targets.insert(name.to_string(), record);
        }
        match self.own.targets[name].clone() {
            None => Err(invalid("unknown-job")),
            Some(record) if record.per_tenant == 0 && record.tenant != tenant => {
                Err(self.refuse("job-of-another-tenant"))
            }
            Some(record) => Ok(record),
        }
    }

    /// Checks a batch of runs against the grant, the options' rule and the bounds, and
    /// builds what to queue.
    async fn plan_enqueue(&mut self, runs: Vec<Asking>) -> Result<Enqueue, HostError> {
        self.jobs_session()?;
        if runs.len() > MAX_BATCH {
            return Err(invalid("too-many-runs"));
        }
        let mut planned = Vec::with_capacity(runs.len());
        let mut bytes = 0;
        // The database's clock, read once a call and only for a `run-at`.
        let mut now = None;
        for (index, run) in runs.iter().enumerate() {
            let record = self.target(&run.job).await?;
            let payload = checked_payload(&run.payload)?;
            if let Some(instance) = &run.instance
                && !crate::rules::name_rule::is_name(instance, MAX_KEY_BYTES)
            {
                return Err(invalid("invalid-key"));
            }
            let now = match (now, run.asked.run_at) {
                (Some(now), _) => now,
                (None, None) => 0,
                (None, Some(_)) => {
                    let store = self.jobs_session()?.store.clone();
                    *now.insert(self.available(store.now().await)?)
                }
            };
            let options = crate::rules::enqueue::from_guest(&run.asked, now)
                .and_then(|options| {
                    options.within_job(crate::queue::kick::job_retries(&record))?;
                    Ok(options)
                })
                .map_err(|refused| invalid(refused.guest_reason()))?;
            bytes += payload.len();
            let session = self.own.session.as_ref().expect("checked above");
            let id = child_id(&session.parent, &session.tenant, self.own.calls, index, run);
            planned.push(ChildRun {
                instance: run.instance.clone().unwrap_or_else(|| id.clone()),
                id,
                job: run.job.clone(),
                tenant: session.tenant.clone(),
                origin: crate::store::Origin::Child.as_str(),
                payload,
                delay_ms: options.claim_delay_ms(now),
                trace_parent: Some(session.trace.clone()),
                parent_attempt: session.parent.attempt,
                detached: i64::from(run.detached),
                event: None,
                max_attempts: options.max_attempts,
                unique: options.unique,
            });
        }
        self.reserve(planned.len(), bytes)?;
        Ok(self.enqueue_of(planned))
    }

    /// Counts `runs` runs and `bytes` payload bytes against the attempt's bounds.
    fn reserve(&mut self, runs: usize, bytes: usize) -> Result<(), HostError> {
        if self.own.started + runs > MAX_RUNS_PER_ATTEMPT
            || self.own.payload_bytes + bytes > MAX_PAYLOAD_BYTES_PER_ATTEMPT
        {
            return Err(self.over_limit());
        }
        self.own.started += runs;
        self.own.payload_bytes += bytes;
        self.own.calls += 1;
        Ok(())
    }

    fn enqueue_of(&self, runs: Vec<ChildRun>) -> Enqueue {
        let session = self.own.session.as_ref().expect("checked by the caller");
        Enqueue {
            parent: session.parent.clone(),
            runs,
        }
    }

    /// The kick's run: the job's default instance (a per-tenant job's: the tenant) and
    /// its manifest payload, as any kick.
    async fn plan_kick(&mut self, job: &str) -> Result<Enqueue, HostError> {
        let record = self.target(job).await?;
        let session = self.own.session.as_ref().expect("checked by target");
        let instance = if record.per_tenant == 0 {
            crate::queue::kick::DEFAULT_INSTANCE.to_string()
        } else {
            session.tenant.clone()
        };
        let occasion = format!(
            "kick:{}:{}:{}",
            session.parent.run_id, session.parent.pass, self.own.calls
        );
        let run = ChildRun {
            id: crate::queue::fan_out::child_id(job, &occasion, &session.tenant),
            job: job.to_string(),
            instance,
            tenant: session.tenant.clone(),
            origin: crate::store::Origin::Kick.as_str(),
            payload: crate::queue::kick::job_payload(&record),
            delay_ms: 0,
            trace_parent: Some(session.trace.clone()),
            parent_attempt: session.parent.attempt,
            detached: 1,
            event: None,
            max_attempts: None,
            unique: None,
        };
        let bytes = run.payload.len();
        self.reserve(1, bytes)?;
        Ok(self.enqueue_of(vec![run]))
    }

    /// The runs an emit queues: one per subscriber of the run's tenant (`events`).
    async fn plan_emit(&mut self, event: &str, payload: &str) -> Result<Enqueue, HostError> {
        let session = self.jobs_session()?;
        if crate::rules::event_name::validate_event(event).is_err() {
            return Err(invalid("invalid-event"));
        }
        if !session.grants.may_emit(event) {
            return Err(self.refuse("event-not-granted"));
        }
        let payload = checked_payload(payload)?;
        let session = self.own.session.as_ref().expect("checked above");
        let key = format!(
            "{}.{}.{}",
            session.parent.run_id, session.parent.pass, self.own.calls
        );
        let planned = crate::queue::events::event_runs(
            &session.store,
            event,
            &key,
            Some(&session.tenant),
            Some(&payload),
            None,
        )
        .await;
        let planned = match planned {
            Ok(runs) => runs,
            Err(_) => {
                self.attempt.signals.unavailable = true;
                return Err(HostError::Unavailable);
            }
        };
        let session = self.own.session.as_ref().expect("checked above");
        let runs: Vec<ChildRun> = planned
            .into_iter()
            .map(|run| ChildRun {
                id: run.id,
                job: run.job,
                instance: run.instance,
                tenant: run.tenant,
                origin: crate::store::Origin::Event.as_str(),
                payload: run.payload,
                delay_ms: 0,
                trace_parent: Some(session.trace.clone()),
                parent_attempt: session.parent.attempt,
                detached: 1,
                event: Some(event.to_string()),
                max_attempts: None,
                unique: None,
            })
            .collect();
        let bytes = runs.iter().map(|r| r.payload.len()).sum();
        self.reserve(runs.len(), bytes)?;
        Ok(self.enqueue_of(runs))
    }

    /// Refuses `write` if its runs would be deeper in their family than
    /// `backlog::MAX_FAMILY_DEPTH`, or pass a queued cap of their tenant or job.
    async fn room_for(&mut self, write: &Enqueue) -> Result<(), HostError> {
        let Some(first) = write.runs.first() else {
            return Ok(());
        };
        let store = self.jobs_session()?.store.clone();
        let depth = match self.own.depth {
            Some(depth) => depth,
            None => {
                let most = crate::queue::backlog::MAX_FAMILY_DEPTH;
                let read = store.family_depth(&write.parent.run_id, most).await;
                let depth = self.available(read)?;
                *self.own.depth.insert(depth)
            }
        };
        if depth >= crate::queue::backlog::MAX_FAMILY_DEPTH {
            self.attempt.signals.refuse(refusal::family_too_deep());
            return Err(invalid("family-too-deep"));
        }
        // A call's runs all belong to the parent's tenant.
        let tenant = first.tenant.clone();
        let mut by_job: HashMap<&str, u64> = HashMap::new();
        for run in &write.runs {
            *by_job.entry(run.job.as_str()).or_default() += 1;
        }
        let in_tenant = write.runs.len() as u64;
        for (job, adding) in by_job {
            let record = match self.own.targets.get(job) {
                Some(Some(record)) => record.clone(),
                _ => match self.available(store.get_job(job).await)? {
                    Some(record) => record,
                    None => continue,
                },
            };
            let caps = crate::queue::backlog::caps_of(&record, &tenant);
            let room =
                crate::queue::backlog::room(&store, job, &tenant, caps, adding, in_tenant).await;
            if let Err(full) = self.available(room)? {
                self.attempt.signals.refuse(refusal::queue_full(&full));
                return Err(invalid("queue-full"));
            }
        }
        Ok(())
    }

    /// A read the host needed, or the guest told the host is unavailable.
    fn available<T>(&mut self, read: Result<T, crate::store::StoreError>) -> Result<T, HostError> {
        read.map_err(|_| {
            self.attempt.signals.unavailable = true;
            HostError::Unavailable
        })
    }

    /// Queues `write` in a fenced write of the host's own.
    async fn enqueue_own(&mut self, write: &Enqueue) -> Result<Vec<EnqueueAnswer>, HostError> {
        self.attempt.own_write_allowed().await?;
        self.room_for(write).await?;
        let session = self.own.session.as_ref().expect("checked by the plan");
        let (store, fence) = (session.store.clone(), session.fence.clone());
        let queued = store.enqueue_fenced(&fence, write).await;
        self.attempt.translate(queued)
    }

    /// Queues `write` inside the guest's transaction `tx`.
    async fn enqueue_in_tx(
        &mut self,
        tx: &Resource<TxHandle>,
        write: &Enqueue,
    ) -> Result<Vec<EnqueueAnswer>, HostError> {
        self.attempt.guest_tx(tx)?;
        self.room_for(write).await?;
        let queued = self
            .attempt
            .guest_tx(tx)?
            .apply(TxEffect::Enqueue(write))
            .await;
        let queued = queued.and_then(Applied::enqueued);
        self.attempt.translate(queued)
    }
}

/// An earlier guest's answer: `duplicate` unless a new run was queued (one its job's cap
/// dropped at once included, as before the unique rule).
fn enqueued(answers: Vec<EnqueueAnswer>) -> Vec<Enqueued> {
    answers
        .into_iter()
        .map(|a| Enqueued {
            duplicate: a.outcome != Outcome::Created,
            run_id: a.run_id,
        })
        .collect()
}

fn started(answers: Vec<EnqueueAnswer>) -> Vec<Started> {
    answers
        .into_iter()
        .map(|a| Started {
            outcome: match a.outcome {
                Outcome::Created if a.dropped => WitOutcome::Dropped,
                Outcome::Created => WitOutcome::Created,
                Outcome::Joined => WitOutcome::Joined,
                Outcome::Replaced => WitOutcome::Replaced,
                Outcome::Debounced => WitOutcome::Debounced,
            },
            run_id: a.run_id,
        })
        .collect()
}

fn one<T>(mut answers: Vec<T>) -> Result<T, HostError> {
    answers.pop().ok_or_else(|| invalid("nothing-queued"))
}

fn new_run(job: String, payload: String, options: Options) -> Asking {
    Asking::of_enqueue(WitNewRun {
        job,
        payload,
        options,
    })
}

fn new_start(job: String, payload: String, options: StartOptions) -> Asking {
    Asking::of_start(NewStart {
        job,
        payload,
        options,
    })
}

fn queued(answers: &[EnqueueAnswer]) -> u32 {
    let created = answers.iter().filter(|a| a.outcome == Outcome::Created);
    u32::try_from(created.count()).unwrap_or(u32::MAX)
}

impl Host for View<'_, JobsCapability> {
    async fn enqueue(
        &mut self,
        job: String,
        payload: String,
        options: Options,
    ) -> Result<Enqueued, HostError> {
        crate::journaled!(
            self.attempt,
            "jobs.enqueue",
            (&job, &payload, &options),
            async {
                let write = self
                    .plan_enqueue(vec![new_run(job, payload, options)])
                    .await?;
                one(enqueued(self.enqueue_own(&write).await?))
            }
        )
    }

    async fn enqueue_in(
        &mut self,
        tx: Resource<TxHandle>,
        job: String,
        payload: String,
        options: Options,
    ) -> Result<Enqueued, HostError> {
        crate::journaled!(
            self.attempt,
            "jobs.enqueue-in",
            (&job, &payload, &options),
            async {
                let write = self
                    .plan_enqueue(vec![new_run(job, payload, options)])
                    .await?;
                one(enqueued(self.enqueue_in_tx(&tx, &write).await?))
            }
        )
    }

    async fn enqueue_all(&mut self, runs: Vec<WitNewRun>) -> Result<Vec<Enqueued>, HostError> {
        crate::journaled!(self.attempt, "jobs.enqueue-all", (&runs,), async {
            let runs = runs.into_iter().map(Asking::of_enqueue).collect();
            let write = self.plan_enqueue(runs).await?;
            Ok(enqueued(self.enqueue_own(&write).await?))
        })
    }

    async fn enqueue_all_in(
        &mut self,
        tx: Resource<TxHandle>,
        runs: Vec<WitNewRun>,
    ) -> Result<Vec<Enqueued>, HostError> {
        crate::journaled!(self.attempt, "jobs.enqueue-all-in", (&runs,), async {
            let runs = runs.into_iter().map(Asking::of_enqueue).collect();
            let write = self.plan_enqueue(runs).await?;
            Ok(enqueued(self.enqueue_in_tx(&tx, &write).await?))
        })
    }

    async fn start(
        &mut self,
        job: String,
        payload: String,
        options: StartOptions,
    ) -> Result<Started, HostError> {
        crate::journaled!(
            self.attempt,
            "jobs.start",
            (&job, &payload, &options),
            async {
                let write = self
                    .plan_enqueue(vec![new_start(job, payload, options)])
                    .await?;
                one(started(self.enqueue_own(&write).await?))
            }
        )
    }

    async fn start_in(
        &mut self,
        tx: Resource<TxHandle>,
        job: String,
        payload: String,
        options: StartOptions,
    ) -> Result<Started, HostError> {
        crate::journaled!(
            self.attempt,
            "jobs.start-in",
            (&job, &payload, &options),
            async {
                let write = self
                    .plan_enqueue(vec![new_start(job, payload, options)])
                    .await?;
                one(started(self.enqueue_in_tx(&tx, &write).await?))
            }
        )
    }

    async fn start_all(&mut self, runs: Vec<NewStart>) -> Result<Vec<Started>, HostError> {
        crate::journaled!(self.attempt, "jobs.start-all", (&runs,), async {
            let runs = runs.into_iter().map(Asking::of_start).collect();
            let write = self.plan_enqueue(runs).await?;
            Ok(started(self.enqueue_own(&write).await?))
        })
    }

    async fn start_all_in(
        &mut self,
        tx: Resource<TxHandle>,
        runs: Vec<NewStart>,
    ) -> Result<Vec<Started>, HostError> {
        crate::journaled!(self.attempt, "jobs.start-all-in", (&runs,), async {
            let runs = runs.into_iter().map(Asking::of_start).collect();
            let write = self.plan_enqueue(runs).await?;
            Ok(started(self.enqueue_in_tx(&tx, &write).await?))
        })
    }

    async fn kick(&mut self, job: String) -> Result<String, HostError> {
        crate::journaled!(self.attempt, "jobs.kick", (&job,), async {
            let write = self.plan_kick(&job).await?;
            self.enqueue_own(&write).await?;
            Ok(write.runs[0].id.clone())
        })
    }

    async fn kick_in(&mut self, tx: Resource<TxHandle>, job: String) -> Result<String, HostError> {
        crate::journaled!(self.attempt, "jobs.kick-in", (&job,), async {
            let write = self.plan_kick(&job).await?;
            self.enqueue_in_tx(&tx, &write).await?;
            Ok(write.runs[0].id.clone())
        })
    }

    async fn emit(&mut self, event: String, payload: String) -> Result<u32, HostError> {
        crate::journaled!(self.attempt, "jobs.emit", (&event, &payload), async {
            let write = self.plan_emit(&event, &payload).await?;
            Ok(queued(&self.enqueue_own(&write).await?))
        })
    }

    async fn emit_in(
        &mut self,
        tx: Resource<TxHandle>,
        event: String,
        payload: String,
    ) -> Result<u32, HostError> {
        crate::journaled!(self.attempt, "jobs.emit-in", (&event, &payload), async {
            let write = self.plan_emit(&event, &payload).await?;
            Ok(queued(&self.enqueue_in_tx(&tx, &write).await?))
        })
    }

    async fn wait_for_children(&mut self, policy: WaitPolicy) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "jobs.wait-for-children", (&policy,), async {
            if self.attempt.signals.waits_for_signal.is_some() {
                return Err(invalid("already-waiting"));
            }
            self.attempt.own_write_allowed().await?;
            let session = self.jobs_session()?;
            let (store, fence, run_id) = (
                session.store.clone(),
                session.fence.clone(),
                session.parent.run_id.clone(),
            );
            let name = match policy {
                WaitPolicy::Fail => "fail",
                WaitPolicy::Continue => "continue",
            };
            match store.wait_for_children_fenced(&fence, &run_id, name).await {
                Ok(true) => {
                    self.attempt.signals.waits_for_children = true;
                    Ok(())
                }
                Ok(false) => self.attempt.translate(Err(GuestDbError::LeaseLost)),
                Err(_) => self.attempt.translate(Err(GuestDbError::Unavailable)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::failure::FailureCode;

    fn asked(job: &str, payload: &str, key: Option<&str>) -> Asking {
        Asking::of_enqueue(WitNewRun {
            job: job.into(),
            payload: payload.into(),
            options: Options {
                instance: None,
                delay_ms: 0,
                priority: 0,
                dedup_key: key.map(str::to_string),
                detached: false,
            },
        })
    }

    fn parent(run_id: &str, pass: i64) -> ParentLink {
        ParentLink {
            run_id: run_id.into(),
            generation: 1,
            pass,
            attempt: 1,
        }
    }

    #[test]
    fn a_retried_pass_names_the_same_children_and_a_changed_call_new_ones() {
        let p = parent("p", 1);
        let id = |p: &ParentLink, call, index, run: &Asking| child_id(p, "acme", call, index, run);
        let a = asked("thumb", r#"{"n":1}"#, None);
        assert_eq!(id(&p, 0, 0, &a), id(&p, 0, 0, &a));
        assert_ne!(id(&p, 0, 0, &a), id(&p, 0, 1, &a));
        assert_ne!(id(&p, 0, 0, &a), id(&p, 1, 0, &a));
        assert_ne!(
            id(&p, 0, 0, &a),
            id(&p, 0, 0, &asked("thumb", r#"{"n":2}"#, None))
        );
        assert_ne!(id(&p, 0, 0, &a), id(&parent("p", 2), 0, 0, &a));
        assert_ne!(id(&p, 0, 0, &a), id(&parent("q", 1), 0, 0, &a));
    }

    #[test]
    fn a_dedup_key_names_one_run_per_job_and_tenant_whoever_asks() {
        let keyed = asked("thumb", r#"{"n":1}"#, Some("order-7"));
        let other = asked("thumb", r#"{"n":2}"#, Some("order-7"));
        assert_eq!(
            child_id(&parent("p", 1), "acme", 0, 0, &keyed),
            child_id(&parent("q", 3), "acme", 5, 9, &other)
        );
        assert_ne!(
            child_id(&parent("p", 1), "acme", 0, 0, &keyed),
            child_id(&parent("p", 1), "beta", 0, 0, &keyed)
        );
        assert_ne!(
            child_id(&parent("p", 1), "acme", 0, 0, &keyed),
            child_id(
                &parent("p", 1),
                "acme",
                0,
                0,
                &asked("resize", "{}", Some("order-7"))
            )
        );
    }

    #[tokio::test]
    async fn a_job_without_the_grant_is_refused_and_the_bound_holds() {
        use crate::sandbox::capability::fixture;
        let (mut jobs, mut shared) = (JobsCapability::new(None), fixture::attempt());
        assert!(matches!(
            View::new(&mut jobs, &mut shared).kick("thumb".into()).await,
            Err(HostError::CapabilityRefused(r)) if r == "not-granted"
        ));
        assert_eq!(
            shared.signals.refused_code(),
            Some(FailureCode::CapabilityRefused)
        );
        let (mut jobs, mut shared) = (JobsCapability::new(None), fixture::attempt());
        jobs.started = MAX_RUNS_PER_ATTEMPT - 1;
        let mut bounded = View::new(&mut jobs, &mut shared);
        assert!(bounded.reserve(1, 10).is_ok());
        assert!(matches!(bounded.reserve(1, 10), Err(HostError::Invalid(r)) if r == "run-limit"));
        assert_eq!(
            bounded.attempt.signals.refused_code(),
            Some(FailureCode::RunLimit)
        );
        assert_eq!(
            jobs.started, MAX_RUNS_PER_ATTEMPT,
            "a refused call counts nothing"
        );
    }
}
