//! The finisher: one task per host that records the endings of attempts, as many as are
//! waiting, in one round trip (group commit). Workers hand an ending over and go on to
//! the next run; the backlog is bounded, so a slow database slows the workers instead of
//! filling memory.
//!
//! Each ending comes back recorded or not, and the finisher decides what follows, as the
//! runner would: an ending whose lease was lost is recorded again as `lease_lost`; one the
//! database refuses (something the guest handed back it will not store) is recorded as
//! `record_failed`, without the guest's output; while the database cannot be reached it
//! tries again until the attempt's lease would have expired anyway — after that, and if
//! the host dies with endings not yet recorded, the run is what surveillance reports
//! (`crashed`), as for any host that stops mid-run.

use super::{Step, report_about};
use crate::rules::failure::FailureCode;
use crate::runs::metrics::Metrics;
use crate::store::{Recorded, Recording, RunChange, RunRecord, RunStatus, Store, StoreError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Most endings one round trip records.
const MAX_BATCH: usize = 256;
/// Requeued runs due within this wake the dispatcher when due; later ones are found by
/// its polling.
const PRECISE_WAKE: Duration = Duration::from_secs(60);

/// An ending handed over by a worker.
pub(super) struct Handover {
    pub recording: Recording,
    /// The run as claimed: for a second recording (lease lost, record failed), and logs.
    pub run: RunRecord,
    /// Until when recording it is worth trying (the attempt's lease expiry).
    pub until: Instant,
    /// The job's payload and retries: a follow-up run's, should the ending become
    /// `record_failed`.
    pub job_payload: String,
    pub retry: crate::rules::job::RetryPolicy,
    /// The run's job has a claim limit (`sequential`, `concurrency`, per key...): once its
    /// ending is recorded another of the job's runs may be claimed, and nothing else would
    /// wake the dispatcher for it.
    pub limited: bool,
}

struct Pending {
    handover: Handover,
    /// Whether this is already a second recording (lease lost or record failed).
    second: bool,
    reply: oneshot::Sender<Result<Step, StoreError>>,
}

/// An ending's recording, to wait for or not.
pub struct Concluding(Waiting);

enum Waiting {
    Ready(Result<Step, StoreError>),
    Finisher(oneshot::Receiver<Result<Step, StoreError>>),
}

impl Concluding {
    pub(super) fn ready(step: Result<Step, StoreError>) -> Concluding {
        Concluding(Waiting::Ready(step))
    }

    /// What the run's ending came to, once recorded.
    pub async fn recorded(self) -> Result<Step, StoreError> {
        match self.0 {
            Waiting::Ready(step) => step,
            Waiting::Finisher(answer) => answer.await.unwrap_or(Err(StoreError::WriterStopped)),
        }
    }
}

pub(super) struct Finisher {
    endings: Mutex<Option<mpsc::Sender<Pending>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Finisher {
    pub(super) fn start(
        store: Store,
        metrics: Arc<Metrics>,
        wake: Arc<Notify>,
        backlog: usize,
    ) -> Finisher {
        let (endings, queue) = mpsc::channel(backlog.max(1));
        let task = tokio::spawn(
            Loop {
                store,
                metrics,
                wake,
            }
            .run(queue),
        );
        Finisher {
            endings: Mutex::new(Some(endings)),
            task: Mutex::new(Some(task)),
        }
    }

    /// Queues an ending (waiting while the backlog is full).
    pub(super) async fn hand_over(&self, handover: Handover) -> Result<Concluding, StoreError> {
        let endings = self
            .endings
            .lock()
            .expect("finisher lock")
            .clone()
            .ok_or(StoreError::WriterStopped)?;
        let (reply, answer) = oneshot::channel();
        endings
            .send(Pending {
                handover,
                second: false,
                reply,
            })
            .await
            .map_err(|_| StoreError::WriterStopped)?;
        Ok(Concluding(Waiting::Finisher(answer)))
    }

    /// Stops taking endings and waits until the ones queued are recorded or given up on.
    pub(super) async fn close(&self) {
        self.endings.lock().expect("finisher lock").take();
        let task = self.task.lock().expect("finisher lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

struct Loop {
    store: Store,
    metrics: Arc<Metrics>,
    wake: Arc<Notify>,
}

impl Loop {
    async fn run(self, mut queue: mpsc::Receiver<Pending>) {
        let mut again: Vec<Pending> = Vec::new();
        let mut pause = Duration::from_millis(100);
        loop {
            let mut batch = std::mem::take(&mut again);
            if batch.is_empty() {
                match queue.recv().await {
                    Some(pending) => batch.push(pending),
                    None => return,
                }
            }
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(pending) => batch.push(pending),
                    Err(_) => break,
                }
            }
            let recordings: Vec<Recording> =
                batch.iter().map(|p| p.handover.recording.clone()).collect();
            let answers = self.store.record_attempts(&recordings).await;
            let mut unreachable = false;
            for (pending, answer) in batch.into_iter().zip(answers) {
                match answer {
                    Ok(Recorded::LeaseLost) if !pending.second => {
                        again.push(lease_lost(pending));
                    }
                    Ok(recorded) => self.done(pending, recorded),
                    Err(e) if e.is_unavailable() || e.is_locked() => {
                        if Instant::now() + pause < pending.handover.until {
                            unreachable = true;
                            again.push(pending);
                        } else {
                            tracing::warn!(job = %pending.handover.run.job, run_id = %pending.handover.run.id, code = "driver_failed", error = %e, "could not record the attempt's end; surveillance will report the run when its lease expires");
                            let _ = pending.reply.send(Err(e));
                        }
                    }
                    Err(e)
                        if !pending.second
                            && !matches!(
                                pending.handover.recording.change,
                                RunChange::GiveBack { .. }
                            ) =>
                    {
                        tracing::warn!(job = %pending.handover.run.job, run_id = %pending.handover.run.id, code = "record_failed", error = %e, "the database refused the attempt's record; recording a fixed failure instead");
                        again.push(record_failed(pending));
                    }
                    Err(e) => {
                        tracing::warn!(job = %pending.handover.run.job, run_id = %pending.handover.run.id, code = "driver_failed", error = %e, "could not record the attempt's end");
                        let _ = pending.reply.send(Err(e));
                    }
                }
            }
            if unreachable {
                tracing::warn!(
                    code = "driver_failed",
                    "database unreachable; recording again"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            } else {
                pause = Duration::from_millis(100);
            }
        }
    }

    /// A recorded ending: its metrics, log line and wake-ups, and the waiter's answer.
    fn done(&self, pending: Pending, recorded: Recorded) {
        let Handover {
            recording,
            run,
            limited,
            ..
        } = pending.handover;
        if limited {
            self.wake.notify_one();
        }
        let step = match (recorded, recording.change) {
            (Recorded::Finished { follow_up }, RunChange::Finish { status, code, .. }) => {
                self.metrics
                    .run_finished(&run.job, &run.tenant, status.as_str(), code);
                if code.is_some() {
                    tracing::info!(job = %run.job, run_id = %run.id, status = status.as_str(), code, "run finished");
                } else {
                    tracing::debug!(job = %run.job, run_id = %run.id, status = status.as_str(), "run finished");
                }
                if follow_up.is_some() {
                    self.wake.notify_one();
                }
                Step::Finished {
                    status,
                    code: code.and_then(FailureCode::parse),
                    follow_up,
                }
            }
            (Recorded::Requeued, RunChange::Requeue { delay_ms, .. }) => {
                let delay = Duration::from_millis(u64::try_from(delay_ms).unwrap_or(0));
                if delay <= PRECISE_WAKE {
                    let wake = self.wake.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        wake.notify_one();
                    });
                }
                Step::Requeued { delay }
            }
            (Recorded::Requeued, _) => Step::GivenBack,
            _ => Step::Abandoned,
        };
        let _ = pending.reply.send(Ok(step));
    }
}

/// The ending again, now that the lease is known lost: whatever the attempt returned, the
/// loss is recorded — on the attempt as on the run, one ending, one code. An attempt an
/// ending from outside stopped (an operator's cancel, its family's end) lost its lease to
/// that ending, which ended the run: it keeps its code.
fn lease_lost(pending: Pending) -> Pending {
    let Pending {
        mut handover,
        reply,
        ..
    } = pending;
    let code = FailureCode::LeaseLost;
    let recording = &mut handover.recording;
    let stopped = |code: Option<&str>| {
        code.and_then(FailureCode::parse)
            .is_some_and(FailureCode::ends_from_outside)
    };
    if recording.attempt.as_ref().is_some_and(|a| stopped(a.code)) {
        if let RunChange::Finish { require_lease, .. } = &mut recording.change {
            *require_lease = false;
        }
        return Pending {
            handover,
            second: true,
            reply,
        };
    }
    if let Some(a) = &mut recording.attempt {
        a.status = "failed";
        a.outcome = None;
        a.code = Some(code.as_str());
    }
    if let RunChange::Finish {
        require_lease,
        status,
        code: run_code,
        error,
        report,
        ..
    } = &mut recording.change
    {
        *require_lease = false;
        *status = RunStatus::Failed;
        *run_code = Some(code.as_str());
        *error = None;
        *report = Some(Box::new(report_about(&handover.run, code)));
    }
    Pending {
        handover,
        second: true,
        reply,
    }
}

/// The ending again, as `record_failed`: the run ends, the guest's output dropped, so a
/// run is never left half-recorded and the failure is not blamed on a crashed host.
fn record_failed(pending: Pending) -> Pending {
    let Pending {
        mut handover,
        reply,
        ..
    } = pending;
    let code = FailureCode::RecordFailed;
    let run = &handover.run;
    let recording = &mut handover.recording;
    if let Some(a) = &mut recording.attempt {
        a.status = "failed";
        a.outcome = None;
        a.code = Some(code.as_str());
        a.log = String::new();
        a.log_truncated = true;
    }
    // The same run as the first recording's follow-up (its id), now after a failure.
    let mut follow_up = super::follow_up(
        run,
        handover.job_payload.clone(),
        &handover.retry,
        RunStatus::Failed,
        run.failures + 1,
    );
    if let RunChange::Finish {
        follow_up: Some(first),
        ..
    } = &recording.change
    {
        follow_up.id = first.id.clone();
    }
    recording.change = RunChange::Finish {
        require_lease: true,
        status: RunStatus::Failed,
        code: Some(code.as_str()),
        error: None,
        cursor: run.cursor.clone(),
        counters: None,
        pass: run.pass,
        failures: run.failures + 1,
        follow_up: Some(Box::new(follow_up)),
        report: Some(Box::new(report_about(run, code))),
    };
    Pending {
        handover,
        second: true,
        reply,
    }
}
