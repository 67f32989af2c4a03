//! The SQLite host's writer for claims and endings of attempts, and for kicks: one thread
//! with its own connection that takes every claim, ending and kick queued meanwhile and
//! runs them in one
//! `BEGIN IMMEDIATE … COMMIT`, each in a savepoint of its own (so one refused item fails
//! alone). Through sqlx every statement would be two hand-offs to a worker thread; here a
//! whole batch is one, and the statements are cached on the connection.
//!
//! The steps are the ones the Postgres functions run (`migrations/postgres/functions`,
//! `claim_runs.sql` and `record_attempts.sql`), with the claims' own statements
//! (`statements`) and the store's shared ones (`queries`: the lease's first take, a
//! kick's, a follow-up's and a report's inserts). SQLite has one writer at a time, so no
//! row locks to order.

use super::{ClaimRequest, ClaimedRow, Claims, Recorded, Recording, RunChange, statements};
use crate::store::AttemptTerms;
use crate::store::cancel_book::CancelBook;
use crate::store::queries::Queries;
use crate::store::{
    NewReport, NewRun, ReportKind, Result, RunRecord, SQLITE_BUSY_TIMEOUT, StoreError,
};
use rusqlite::{CachedStatement, Connection, OpenFlags, ToSql};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, mpsc};
use tokio::sync::oneshot;

/// Most claims and endings one transaction takes: a bound on how long it holds the write
/// lock.
const MAX_BATCH: usize = 512;

pub(crate) struct SqliteWriter {
    jobs: mpsc::Sender<Job>,
}

enum Job {
    Claim {
        order: ClaimOrder,
        reply: oneshot::Sender<Result<Vec<ClaimedRow>>>,
    },
    Record {
        items: Vec<Recording>,
        reply: oneshot::Sender<Vec<Result<Recorded>>>,
    },
    Kick {
        run: NewRun,
        reply: oneshot::Sender<Result<Option<RunRecord>>>,
    },
}

impl Job {
    fn size(&self) -> usize {
        match self {
            Job::Claim { order, .. } => usize::try_from(order.limit).unwrap_or(1).max(1),
            Job::Record { items, .. } => items.len().max(1),
            Job::Kick { .. } => 1,
        }
    }
}

/// What a job answers once the transaction has committed.
enum Answer {
    Claim(
        oneshot::Sender<Result<Vec<ClaimedRow>>>,
        Result<Vec<ClaimedRow>>,
    ),
    Record(
        oneshot::Sender<Vec<Result<Recorded>>>,
        Vec<Result<Recorded>>,
    ),
    /// Boxed: a run record is several times the size of the other answers.
    Kick(
        oneshot::Sender<Result<Option<RunRecord>>>,
        Box<Result<Option<RunRecord>>>,
    ),
}

impl SqliteWriter {
    /// Opens the writer's connection to the database at `path` (which the pools created
    /// and migrated) and starts its thread; it stops when the store is dropped.
    pub(crate) fn open(
        path: &Path,
        q: &'static Queries,
        cancels: &Arc<CancelBook>,
    ) -> Result<SqliteWriter> {
        let conn = connect(path, cancels).map_err(sqlite_error)?;
        let (jobs, queue) = mpsc::channel();
        let path = path.to_path_buf();
        let cancels = cancels.clone();
        std::thread::Builder::new()
            .name("jobhost-sqlite-writer".into())
            .spawn(move || serve(conn, &path, &cancels, q, &queue))
            .map_err(|_| StoreError::WriterStopped)?;
        Ok(SqliteWriter { jobs })
    }
}

impl Claims for SqliteWriter {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Vec<ClaimedRow>> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Claim {
                order: ClaimOrder {
                    host: request.host.to_string(),
                    limit: request.limit,
                    run_id: request.run_id.map(str::to_string),
                    terms: request.terms.clone(),
                    paused: request.paused.to_vec(),
                },
                reply,
            })
            .map_err(|_| StoreError::WriterStopped)?;
        answer.await.map_err(|_| StoreError::WriterStopped)?
    }

    async fn record(&self, items: &[Recording]) -> Vec<Result<Recorded>> {
        let n = items.len();
        let items = items.to_vec();
        let (reply, answer) = oneshot::channel();
        if self.jobs.send(Job::Record { items, reply }).is_err() {
            return (0..n).map(|_| Err(StoreError::WriterStopped)).collect();
        }
        answer
            .await
            .unwrap_or_else(|_| (0..n).map(|_| Err(StoreError::WriterStopped)).collect())
    }

    /// One hand-off to this thread instead of a statement at a time through a pool: a
    /// kick's answer waits on it.
    async fn kick(&self, run: &NewRun) -> Result<Option<RunRecord>> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Kick {
                run: run.clone(),
                reply,
            })
            .map_err(|_| StoreError::WriterStopped)?;
        answer.await.map_err(|_| StoreError::WriterStopped)?
    }
}

fn connect(path: &Path, cancels: &Arc<CancelBook>) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    // SAFETY: the connection is open and used on this thread.
    let code = unsafe { cancels.install(conn.handle()) };
    if code != libsqlite3_sys::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ));
    }
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// The writer thread: a batch of jobs per transaction, until every sender is gone.
///
/// Whatever a batch ends with, the connection is never left inside a transaction (it
/// would hold the file's one write lock for every other process): one that cannot be
/// rolled back is closed, which rolls back, and opened anew.
fn serve(
    mut conn: Connection,
    path: &Path,
    cancels: &Arc<CancelBook>,
    q: &'static Queries,
    queue: &mpsc::Receiver<Job>,
) {
    while let Ok(first) = queue.recv() {
        serve_batch(&conn, q, queue, first);
        if conn.is_autocommit() {
            continue;
        }
        let _ = conn.execute_batch("ROLLBACK");
        if conn.is_autocommit() {
            continue;
        }
        tracing::error!(
            code = "driver_failed",
            "the SQLite writer could not end its transaction; reopening it"
        );
        match connect(path, cancels) {
            Ok(fresh) => drop(std::mem::replace(&mut conn, fresh)),
            Err(e) => {
                tracing::error!(code = "driver_failed", error = %sqlite_error_ref(&e), "cannot reopen the SQLite writer");
                return;
            }
        }
    }
}

/// One batch: the jobs queued behind `first`, in one transaction.
fn serve_batch(conn: &Connection, q: &'static Queries, queue: &mpsc::Receiver<Job>, first: Job) {
    let mut size = first.size();
    let mut batch = vec![first];
    while size < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => {
                size += job.size();
                batch.push(job);
            }
            Err(_) => break,
        }
    }
    let answers = match conn.execute_batch("BEGIN IMMEDIATE") {
        Ok(()) => {
            let answers: Vec<Answer> = batch.into_iter().map(|job| run(conn, q, job)).collect();
            match conn.execute_batch("COMMIT") {
                Ok(()) => answers,
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    answers.into_iter().map(|a| a.failed(&e)).collect()
                }
            }
        }
        Err(e) => batch.into_iter().map(|job| job.failed(&e)).collect(),
    };
    for answer in answers {
        answer.send();
    }
}

impl Job {
    fn failed(self, e: &rusqlite::Error) -> Answer {
        match self {
            Job::Claim { reply, .. } => Answer::Claim(reply, Err(sqlite_error_ref(e))),
            Job::Record { items, reply } => Answer::Record(
                reply,
                items.iter().map(|_| Err(sqlite_error_ref(e))).collect(),
            ),
            Job::Kick { reply, .. } => Answer::Kick(reply, Box::new(Err(sqlite_error_ref(e)))),
        }
    }
}

impl Answer {
    fn failed(self, e: &rusqlite::Error) -> Answer {
        match self {
            Answer::Claim(reply, _) => Answer::Claim(reply, Err(sqlite_error_ref(e))),
            Answer::Record(reply, answers) => Answer::Record(
                reply,
                answers.iter().map(|_| Err(sqlite_error_ref(e))).collect(),
            ),
            Answer::Kick(reply, _) => Answer::Kick(reply, Box::new(Err(sqlite_error_ref(e)))),
        }
    }

    fn send(self) {
        // A caller that stopped waiting (its task was cancelled) gets nothing: what was
        // committed stays committed, as with any write whose answer is lost.
        match self {
            Answer::Claim(reply, answer) => drop(reply.send(answer)),
            Answer::Record(reply, answers) => drop(reply.send(answers)),
            Answer::Kick(reply, answer) => drop(reply.send(*answer)),
        }
    }
}

fn run(conn: &Connection, q: &'static Queries, job: Job) -> Answer {
    match job {
        Job::Claim { order, reply } => {
            let claimed = in_savepoint(conn, || claim(conn, q, &order));
            Answer::Claim(reply, claimed.map_err(sqlite_error))
        }
        Job::Record { items, reply } => {
            let mut succeeded = BTreeSet::new();
            let answers = items
                .iter()
                .map(|item| {
                    in_savepoint(conn, || record(conn, q, item, &mut succeeded))
                        .map_err(sqlite_error)
                })
                .collect();
            let c = &*statements::SQLITE;
            for job in &succeeded {
                // A job's last success is a timestamp for missed-schedule reports: failing
                // to move it must not undo the endings.
                if let Err(e) = in_savepoint(conn, || execute(conn, &c.record_success, &[job])) {
                    tracing::warn!(job = %job, code = "driver_failed", error = %sqlite_error_ref(&e), "could not record the job's last success");
                }
            }
            Answer::Record(reply, answers)
        }
        Job::Kick { run, reply } => {
            let kicked = in_savepoint(conn, || kick(conn, q, &run));
            Answer::Kick(reply, Box::new(kicked.map_err(sqlite_error)))
        }
    }
}

fn kick(
    conn: &Connection,
    q: &'static Queries,
    run: &NewRun,
) -> rusqlite::Result<Option<RunRecord>> {
    if execute(conn, &q.set_pending, &[&run.job, &run.instance])? == 1 {
        return Ok(None);
    }
    let queued = insert_new_run(conn, &q.queue_run, run, |rows| {
        rows.next()?.map(run_record).transpose()
    })?
    .ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    if queued.dropped_by_limit() {
        let report = NewReport::about_run(
            ReportKind::Dropped,
            &queued,
            crate::rules::failure::FailureCode::TenantLimit,
        );
        insert_report(conn, q, &report)?;
    }
    Ok(Some(queued))
}

/// Runs `sql`, an insert of a new run, with the run's values as `$1`… in the order of
/// `store::bind_new_run`, and reads what it returns with `read`.
fn insert_new_run<T>(
    conn: &Connection,
    sql: &str,
    run: &NewRun,
    read: impl FnOnce(&mut rusqlite::Rows<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let cursor = run.cursor.as_deref();
    let digest = run.component_digest.as_deref();
    let rerun_of = run.rerun_of.as_deref();
    let trace_parent = run.trace_parent.map(|t| t.to_string());
    let mut statement = prepared(
        conn,
        sql,
        &[
            &run.id,
            &run.job,
            &run.instance,
            &run.tenant,
            &run.origin.as_str(),
            &run.payload,
            &cursor,
            &digest,
            &run.scheduled_for,
            &rerun_of,
            &run.delay_ms,
            &trace_parent,
        ],
    )?;
    read(&mut statement.raw_query())
}

fn insert_report(
    conn: &Connection,
    q: &'static Queries,
    report: &NewReport,
) -> rusqlite::Result<()> {
    execute(
        conn,
        &q.insert_report,
        &[
            &report.kind.as_str(),
            &report.job,
            &report.run_id,
            &report.code,
            &report.body,
        ],
    )
    .map(drop)
}

/// Runs `step` in a savepoint: undone alone if it fails.
fn in_savepoint<T>(
    conn: &Connection,
    step: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    // Cached statements: parsing these two for every item costs the writer a tenth of
    // its time in a drain.
    conn.prepare_cached("SAVEPOINT step")?.raw_execute()?;
    match step() {
        Ok(value) => {
            conn.prepare_cached("RELEASE step")?.raw_execute()?;
            Ok(value)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO step; RELEASE step");
            Err(e)
        }
    }
}

/// A [`ClaimRequest`] as the writer thread takes it.
struct ClaimOrder {
    host: String,
    limit: i64,
    run_id: Option<String>,
    terms: BTreeMap<String, AttemptTerms>,
    paused: Vec<String>,
}

/// A due run, or the one asked for.
struct Candidate {
    id: String,
    job: String,
    instance: String,
    generation: Option<i64>,
    tenant: String,
    waiting: bool,
    next_attempt_at: i64,
    limit_key: Option<String>,
}

fn candidate(row: &rusqlite::Row<'_>) -> rusqlite::Result<Candidate> {
    Ok(Candidate {
        id: row.get(0)?,
        job: row.get(1)?,
        instance: row.get(2)?,
        generation: row.get(3)?,
        tenant: row.get(4)?,
        waiting: row.get::<_, i64>(5)? != 0,
        next_attempt_at: row.get(6)?,
        limit_key: row.get(7)?,
    })
}

/// Up to `limit` due runs of the jobs in `order`, fair across tenants: an equal share
/// of the batch from each tenant with queued runs (but those `paused`), taken in turns
/// (every tenant's first run, then every tenant's second...), as the Postgres claim of
/// migration 0010 does.
fn fair_due_runs(conn: &Connection, order: &ClaimOrder) -> rusqlite::Result<Vec<Candidate>> {
    let c = &*statements::SQLITE;
    let limit = order.limit;
    let mut tenants: Vec<String> = Vec::new();
    {
        let mut statement = prepared(conn, &c.queued_tenants, &[])?;
        let mut rows = statement.raw_query();
        while let Some(row) = rows.next()? {
            let tenant: String = row.get(0)?;
            if !order.paused.contains(&tenant) {
                tenants.push(tenant);
            }
        }
    }
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    let share = (limit.max(1) as usize).div_ceil(tenants.len()).max(1) as i64;
    let jobs = serde_json::to_string(&order.terms.keys().collect::<Vec<_>>())
        .expect("job names serialise");
    let mut turns: Vec<(usize, Candidate)> = Vec::new();
    for tenant in &tenants {
        let mut statement = prepared(conn, &c.due_runs, &[&share, &jobs, tenant])?;
        let mut rows = statement.raw_query();
        let mut turn = 0;
        while let Some(row) = rows.next()? {
            turns.push((turn, candidate(row)?));
            turn += 1;
        }
    }
    turns.sort_by(|(ta, a), (tb, b)| {
        (ta, a.next_attempt_at, &a.id).cmp(&(tb, b.next_attempt_at, &b.id))
    });
    turns.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(turns.into_iter().map(|(_, c)| c).collect())
}

fn claim(
    conn: &Connection,
    q: &'static Queries,
    order: &ClaimOrder,
) -> rusqlite::Result<Vec<ClaimedRow>> {
    let c = &*statements::SQLITE;
    let (host, terms) = (order.host.as_str(), &order.terms);
    let candidates: Vec<Candidate> = match &order.run_id {
        Some(id) => {
            let mut statement = prepared(conn, &c.claimable_run, &[id, &host])?;
            let mut rows = statement.raw_query();
            let mut candidates = Vec::new();
            while let Some(row) = rows.next()? {
                candidates.push(candidate(row)?);
            }
            candidates
        }
        // Only runs of the jobs this host serves (the others stay queued).
        None => fair_due_runs(conn, order)?,
    };
    let mut claimed = Vec::with_capacity(candidates.len());
    let mut limits: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let mut full: BTreeSet<String> = BTreeSet::new();
    for run in candidates {
        // Checked per run, after the runs claimed before it in this batch started: the
        // single writer orders every claim, so this sees each running run and each start
        // in a rate's window.
        let (limited, rated) = match limits.get(&run.job) {
            Some(flags) => *flags,
            None => {
                let flags = job_limits(conn, &run.job)?;
                limits.insert(run.job.clone(), flags);
                flags
            }
        };
        if limited {
            // Once the whole job is held, its other candidates are passed over unchecked:
            // one check per job and claim, not per candidate.
            if full.contains(&run.job) {
                continue;
            }
            match held_back(conn, &run.id)? {
                Some(limit) if limit == "key" => continue,
                Some(_) => {
                    full.insert(run.job.clone());
                    continue;
                }
                None => {}
            }
        }
        if run.waiting && count(conn, &c.slot_taken, &[&run.job, &run.tenant, &run.id])? > 0 {
            prepared(conn, &c.wait_for_slot, &[&run.id])?.raw_execute()?;
            continue;
        }
        let terms = terms.get(&run.job);
        let lease: Option<(i64, i64, i64)> = match (terms, run.generation) {
            (None, _) => None,
            (Some(t), None) => {
                let mut s = prepared(
                    conn,
                    &q.acquire_lease,
                    &[
                        &run.job,
                        &run.instance,
                        &run.id,
                        &t.deadline_ms,
                        &t.expires_ms,
                    ],
                )?;
                lease_of(&mut s)?
            }
            (Some(t), Some(generation)) => {
                let mut s = prepared(
                    conn,
                    &c.renew_lease,
                    &[
                        &run.job,
                        &run.instance,
                        &generation,
                        &run.id,
                        &t.deadline_ms,
                        &t.expires_ms,
                    ],
                )?;
                lease_of(&mut s)?
            }
        };
        let generation = lease.map(|(generation, _, _)| generation);
        let digest = terms.map(|t| t.digest.as_str());
        let mut s = prepared(conn, &c.start_run, &[&run.id, &host, &generation, &digest])?;
        let mut rows = s.raw_query();
        if let Some(row) = rows.next()? {
            claimed.push(ClaimedRow {
                run: run_record(row)?,
                lease_deadline_at: lease.map(|(_, deadline, _)| deadline),
                lease_expires_at: lease.map(|(_, _, expires)| expires),
            });
            drop(rows);
            if rated {
                prepared(conn, &c.record_start, &[&run.job, &run.limit_key])?.raw_execute()?;
                prepared(conn, &c.prune_starts, &[&run.job])?.raw_execute()?;
            }
        }
    }
    Ok(claimed)
}

/// Whether job `job` has a claim limit, and a rate among them (`job_limits`).
fn job_limits(conn: &Connection, job: &str) -> rusqlite::Result<(bool, bool)> {
    let mut statement = prepared(conn, &statements::SQLITE.job_limits, &[&job])?;
    let mut rows = statement.raw_query();
    match rows.next()? {
        Some(row) => Ok((row.get::<_, i64>(0)? != 0, row.get::<_, i64>(1)? != 0)),
        None => Ok((false, false)),
    }
}

/// Which limit of run `id`'s job or key holds it back now, if any (`held_back`).
fn held_back(conn: &Connection, id: &str) -> rusqlite::Result<Option<String>> {
    let mut statement = prepared(conn, &statements::SQLITE.held_back, &[&id])?;
    let mut rows = statement.raw_query();
    Ok(match rows.next()? {
        Some(row) => row.get::<_, Option<String>>(0)?,
        None => None,
    })
}

/// The one number a `SELECT COUNT(*)` answers.
fn count(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> rusqlite::Result<i64> {
    Ok(prepared(conn, sql, params)?
        .raw_query()
        .next()?
        .map(|row| row.get(0))
        .transpose()?
        .unwrap_or(0))
}

/// The lease a statement returning `{lease_columns}` took: generation, deadline, expiry.
fn lease_of(statement: &mut CachedStatement<'_>) -> rusqlite::Result<Option<(i64, i64, i64)>> {
    let mut rows = statement.raw_query();
    match rows.next()? {
        Some(row) => Ok(Some((
            row.get("generation")?,
            row.get("deadline_at")?,
            row.get("expires_at")?,
        ))),
        None => Ok(None),
    }
}

fn record(
    conn: &Connection,
    q: &'static Queries,
    item: &Recording,
    succeeded: &mut BTreeSet<String>,
) -> rusqlite::Result<Recorded> {
    let c = &*statements::SQLITE;
    let lease = &item.lease;
    let pending: Option<i64> = prepared(
        conn,
        &c.lease_pending,
        &[
            &lease.job,
            &lease.instance,
            &lease.generation,
            &lease.holder,
        ],
    )?
    .raw_query()
    .next()?
    .map(|row| row.get(0))
    .transpose()?;
    let finishing = matches!(item.change, RunChange::Finish { .. });
    if let RunChange::Finish {
        require_lease: true,
        ..
    } = item.change
        && pending.is_none()
    {
        return Ok(Recorded::LeaseLost);
    }
    if let Some(a) = &item.attempt {
        execute(
            conn,
            &c.record_attempt,
            &[
                &item.run_id,
                &a.seq,
                &a.pass,
                &a.attempt,
                &lease.generation,
                &a.host,
                &a.status,
                &a.outcome,
                &a.code,
                &a.fuel_used,
                &a.peak_memory,
                &a.duration_ms,
                &a.log,
                &i64::from(a.log_truncated),
                &a.started_at,
            ],
        )?;
    }
    let running: i64 = prepared(conn, &c.run_running, &[&item.run_id, &lease.generation])?
        .raw_query()
        .next()?
        .map(|row| row.get(0))
        .transpose()?
        .unwrap_or(0);
    if running == 0 || (!finishing && pending.is_none()) {
        return Ok(Recorded::NotRunning);
    }
    // A run whose guest start is not written yet (`runs::runner::starts`) takes its start
    // from its attempt.
    let guest_started_at = item.attempt.as_ref().map(|a| a.started_at);
    match &item.change {
        RunChange::Finish {
            status,
            code,
            error,
            cursor,
            counters,
            pass,
            failures,
            follow_up,
            report,
            ..
        } => {
            execute(
                conn,
                &c.finish_run,
                &[
                    &item.run_id,
                    &lease.generation,
                    &status.as_str(),
                    code,
                    error,
                    cursor,
                    pass,
                    failures,
                    counters,
                    &guest_started_at,
                ],
            )?;
            execute(
                conn,
                &c.release_lease,
                &[&lease.job, &lease.instance, &lease.generation],
            )?;
            let mut queued = None;
            if pending == Some(1)
                && let Some(run) = follow_up
            {
                insert_new_run(conn, &q.insert_run, run, |rows| rows.next().map(drop))?;
                queued = Some(run.id.clone());
            }
            if *status == crate::store::RunStatus::Succeeded {
                succeeded.insert(lease.job.clone());
            }
            if let Some(report) = report {
                insert_report(conn, q, report)?;
            }
            Ok(Recorded::Finished { follow_up: queued })
        }
        RunChange::Requeue {
            delay_ms,
            hold_ms,
            pass,
            cursor,
            counters,
            failures,
            defers,
            code,
            error,
        } => {
            park(conn, item, *hold_ms)?;
            execute(
                conn,
                &c.requeue_run,
                &[
                    &item.run_id,
                    &lease.generation,
                    delay_ms,
                    pass,
                    cursor,
                    failures,
                    code,
                    error,
                    counters,
                    defers,
                    &guest_started_at,
                ],
            )?;
            Ok(Recorded::Requeued)
        }
        RunChange::GiveBack { hold_ms } => {
            park(conn, item, *hold_ms)?;
            execute(conn, &c.give_back_run, &[&item.run_id, &lease.generation])?;
            Ok(Recorded::Requeued)
        }
    }
}

fn park(conn: &Connection, item: &Recording, hold_ms: i64) -> rusqlite::Result<usize> {
    let c = &*statements::SQLITE;
    let lease = &item.lease;
    execute(
        conn,
        &c.park_lease,
        &[
            &lease.job,
            &lease.instance,
            &lease.generation,
            &lease.holder,
            &hold_ms,
        ],
    )
}

/// A cached statement with `values` bound to its parameters `$1`, `$2`, … by name (a
/// statement may use them in any order, or one twice).
fn prepared<'c>(
    conn: &'c Connection,
    sql: &str,
    values: &[&dyn ToSql],
) -> rusqlite::Result<CachedStatement<'c>> {
    let mut statement = conn.prepare_cached(sql)?;
    if statement.parameter_count() != values.len() {
        return Err(rusqlite::Error::InvalidParameterCount(
            values.len(),
            statement.parameter_count(),
        ));
    }
    for (i, value) in values.iter().enumerate() {
        let name = format!("${}", i + 1);
        let index = statement
            .parameter_index(&name)?
            .ok_or_else(|| rusqlite::Error::InvalidParameterName(name))?;
        statement.raw_bind_parameter(index, value)?;
    }
    Ok(statement)
}

fn execute(conn: &Connection, sql: &str, values: &[&dyn ToSql]) -> rusqlite::Result<usize> {
    prepared(conn, sql, values)?.raw_execute()
}

/// A run row as `{run_columns}` returns it.
fn run_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: row.get("id")?,
        job: row.get("job")?,
        instance: row.get("instance")?,
        tenant: row.get("tenant")?,
        origin: row.get("origin")?,
        payload: row.get("payload")?,
        status: row.get("status")?,
        pass: row.get("pass")?,
        cursor: row.get("cursor")?,
        counters: row.get("counters")?,
        attempts: row.get("attempts")?,
        failures: row.get("failures")?,
        generation: row.get("generation")?,
        host: row.get("host")?,
        last_code: row.get("last_code")?,
        last_error: row.get("last_error")?,
        component_digest: row.get("component_digest")?,
        scheduled_for: row.get("scheduled_for")?,
        rerun_of: row.get("rerun_of")?,
        next_attempt_at: row.get("next_attempt_at")?,
        created_at: row.get("created_at")?,
        started_at: row.get("started_at")?,
        finished_at: row.get("finished_at")?,
        updated_at: row.get("updated_at")?,
        work_done: row.get("work_done")?,
        defers: row.get("defers")?,
        trace_parent: row.get("trace_parent")?,
        resumed_by: row.get("resumed_by")?,
        retry_of: row.get("retry_of")?,
        retried_by: row.get("retried_by")?,
        parent_run: row.get("parent_run")?,
        parent_attempt: row.get("parent_attempt")?,
        event: row.get("event")?,
        detached: row.get("detached")?,
        wait_pass: row.get("wait_pass")?,
        wait_policy: row.get("wait_policy")?,
        result: row.get("result")?,
        signal_name: row.get("signal_name")?,
        signal_pass: row.get("signal_pass")?,
        guest_started_at: row.get("guest_started_at")?,
        max_attempts: row.get("max_attempts")?,
    })
}

fn sqlite_error(e: rusqlite::Error) -> StoreError {
    sqlite_error_ref(&e)
}

/// The error's SQLite code only: its message can quote a statement or a value.
fn sqlite_error_ref(e: &rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(failure, _) => StoreError::Sqlite {
            code: failure.extended_code,
        },
        _ => StoreError::Sqlite { code: 1 },
    }
}
