//! Every statement the host runs on its own tables, written once for both backends; those
//! only claims and endings run are with them, in `claims::statements`.
//!
//! Placeholders are `$N` (both sqlx drivers bind `$N` to the N-th argument). The few
//! differences between the engines are tokens a [`Dialect`] renders: `{now}` is the
//! database's clock in milliseconds (Postgres' `clock_timestamp()`, not the transaction's
//! start time), `{skip_locked}` and `{for_update}` are row locks Postgres needs and SQLite's
//! single writer makes unnecessary, `{json_ids}` is the set of strings in the JSON array
//! `$1` (`{json_strings_2}` the same of `$2`).

pub(crate) struct Dialect {
    pub now: &'static str,
    pub skip_locked: &'static str,
    pub for_update: &'static str,
    /// Opens a transaction that writes: SQLite must take its write lock up front, or two
    /// readers that both upgrade fail with SQLITE_BUSY instead of waiting.
    pub begin_write: &'static str,
    /// Serialises migrations across hosts that start together.
    pub migration_lock: Option<&'static str>,
    /// How many tables or views named `$1` the operator's schema has.
    pub table_exists: &'static str,
    /// The strings of the JSON array bound to `$1`, as a subquery.
    pub json_ids: &'static str,
    /// The rows `(id, generation, at)` of the JSON array of triples bound to `$1`.
    pub json_guest_starts: &'static str,
    /// A row's physical address, for deleting a bounded batch of rows with no key.
    pub row_id: &'static str,
    /// How many runs of job `$2` and tenant `$4` are queued or running, counted so that
    /// two transactions queueing runs of one job and tenant are ordered (on Postgres,
    /// under a lock: `jobhost_active_runs` of migration 0010; SQLite has one writer).
    pub active_runs: &'static str,
    /// A random number in [0, 1).
    pub random_unit: &'static str,
    /// Makes a statement over queued runs by tenant read the index made for it: SQLite's
    /// planner, without statistics, would sort every queued run instead.
    pub by_tenant_index: &'static str,
    /// Makes surveillance read queued manual runs by the index that holds only them:
    /// SQLite's planner, without statistics, would read every queued run by status.
    pub manual_queued_index: &'static str,
    /// How runs due at the same time are ordered in a claim: on SQLite in the order they
    /// were queued (the rowid, which ends every entry of the claim's indexes, migration
    /// 0021), so a backlog's runs are taken where they lie, whatever their ids; on
    /// Postgres by id (its claim functions).
    pub queue_order: &'static str,
    /// A run's place in that order as text (a sweep's page ends there), and `$2` read back.
    pub queue_position: &'static str,
    pub queue_position_2: &'static str,
    /// Where text `$2` starts in text `$1` (1-based), 0 if nowhere.
    pub text_position: &'static str,
    /// Why queued run `{run}` may not start now, or NULL: the claim's limits
    /// (`jobhost_held_back` on Postgres, its twin inline on SQLite).
    pub held_back: &'static str,
    /// `{unmarked:X}`: run `X` has no cancel recorded in the cancel book (SQLite's
    /// `store::cancel_book`; a Postgres cancel commits at once, and renders nothing).
    pub unmarked: Option<&'static str>,
}

pub(crate) const SQLITE: Dialect = Dialect {
    now: "CAST(unixepoch('subsec') * 1000 AS BIGINT)",
    skip_locked: "",
    for_update: "",
    begin_write: "BEGIN IMMEDIATE",
    migration_lock: None,
    table_exists: "SELECT COUNT(*) FROM sqlite_schema WHERE type IN ('table', 'view') AND name = $1",
    json_ids: "(SELECT value FROM json_each($1))",
    json_guest_starts: "(SELECT json_extract(value, '$[0]') AS id, \
        json_extract(value, '$[1]') AS generation, json_extract(value, '$[2]') AS at \
        FROM json_each($1))",
    row_id: "rowid",
    active_runs: "(SELECT COUNT(*) FROM jobhost_runs a WHERE a.job = $2 AND a.tenant = $4 \
        AND a.status IN ('queued', 'running'))",
    random_unit: "((abs(random()) % 1000000) / 1000000.0)",
    by_tenant_index: "INDEXED BY jobhost_runs_queued_by_tenant",
    manual_queued_index: "INDEXED BY jobhost_runs_manual_queued",
    queue_order: "rowid",
    queue_position: "CAST(rowid AS TEXT)",
    queue_position_2: "CAST($2 AS INTEGER)",
    text_position: "instr",
    held_back: HELD_BACK_SQLITE,
    unmarked: Some("AND NOT jobhost_cancel_marked"),
};

pub(crate) const POSTGRES: Dialect = Dialect {
    now: "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    skip_locked: "FOR UPDATE SKIP LOCKED",
    for_update: "FOR UPDATE",
    begin_write: "BEGIN",
    migration_lock: Some("SELECT pg_advisory_xact_lock(7243410671)"),
    table_exists: "SELECT COUNT(*) FROM pg_catalog.pg_class c \
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
        WHERE c.relname = $1 AND n.nspname = current_schema()",
    json_ids: "(SELECT jsonb_array_elements_text(CAST($1 AS JSONB)))",
    json_guest_starts: "(SELECT e ->> 0 AS id, CAST(e ->> 1 AS BIGINT) AS generation, \
        CAST(e ->> 2 AS BIGINT) AS at FROM jsonb_array_elements(CAST($1 AS JSONB)) AS e)",
    row_id: "ctid",
    active_runs: "jobhost_active_runs($2, $4)",
    random_unit: "random()",
    by_tenant_index: "",
    manual_queued_index: "",
    queue_order: "id",
    queue_position: "id",
    queue_position_2: "$2",
    text_position: "strpos",
    held_back: "jobhost_held_back({run}.job, {run}.id, {run}.limit_key, {run}.created_at)",
    unmarked: None,
};

const RUN_COLUMNS: &str = "id, job, instance, tenant, origin, payload, status, pass, cursor, \
    counters, attempts, failures, generation, host, last_code, last_error, component_digest, \
    scheduled_for, rerun_of, next_attempt_at, created_at, started_at, finished_at, updated_at, \
    work_done, defers, trace_parent, resumed_by, retry_of, retried_by, parent_run, \
    parent_attempt, event, detached, wait_pass, wait_policy, result, signal_name, signal_pass, \
    guest_started_at, max_attempts";

const JOB_COLUMNS: &str = "name, tenant, component_path, component_digest, spec, schedule, \
    next_fire_at, registered_at, updated_at, last_success_at, missed_reported_at, per_tenant, \
    orphaned_at";

const LEASE_COLUMNS: &str =
    "job, instance, generation, holder, deadline_at, expires_at, pending, updated_at";

const ATTEMPT_COLUMNS: &str = "run_id, seq, pass, attempt, generation, host, status, outcome, \
    code, fuel_used, peak_memory, duration_ms, log, log_truncated, started_at, finished_at";

const REPORT_COLUMNS: &str = "id, kind, job, run_id, code, body, created_at, logged_at, \
    webhook_attempts, next_try_at, delivered_at";

const FILE_COLUMNS: &str =
    "tenant, collection, name, object_key, size, digest, status, run_id, created_at";

/// What an attach changes when the name exists: everything but the name.
const FILE_UPSERT: &str = "ON CONFLICT (tenant, collection, name) DO UPDATE SET \
    object_key = excluded.object_key, size = excluded.size, digest = excluded.digest, \
    status = excluded.status, run_id = excluded.run_id, created_at = excluded.created_at \
    RETURNING created_at";

/// Whether attaching a file of `:size` bytes keeps tenant `:tenant` within its quota of
/// `:max_objects` objects and `:max_bytes` bytes in `:collection`: the usage counted by the
/// triggers of migrations 0015 and 0019 — what its names point at, and what they pointed
/// at until the collector deletes it — with this file added. The file the name points at
/// now is not taken off: replaced, it still takes its bytes until it is collected. The
/// one SQLite statement of the rule; Postgres' `jobhost_attach_file` (migration 0019)
/// checks the same under a lock on the usage row.
const FILE_WITHIN_QUOTA: &str = "(SELECT COALESCE(SUM(u.objects), 0) + 1 <= :max_objects \
    AND COALESCE(SUM(u.bytes), 0) + :size <= :max_bytes \
    FROM jobhost_file_usage u WHERE u.tenant = :tenant AND u.collection = :collection)";

/// [`FILE_WITHIN_QUOTA`] with its arguments at the given placeholders.
fn file_within_quota(
    tenant: &str,
    collection: &str,
    size: &str,
    max_objects: &str,
    max_bytes: &str,
) -> String {
    FILE_WITHIN_QUOTA
        .replace(":tenant", tenant)
        .replace(":collection", collection)
        .replace(":size", size)
        .replace(":max_objects", max_objects)
        .replace(":max_bytes", max_bytes)
}

/// The lease row of the attempt whose fence is `$1`..`$4`, while it holds the lease and
/// its run has no cancel pending in the cancel book.
const FENCE_MATCH: &str = "job = $1 AND instance = $2 AND generation = $3 AND holder = $4 \
    AND deadline_at > {now} {unmarked:$4}";

/// The run (of the unaliased `jobhost_runs`) may start: no limit of its whole job holds it
/// (`sequential`, `concurrency`, `rate`: read once per statement, per job), and, for a job
/// with per-key limits, none of its key ([`Dialect::held_back`], per run). Only an
/// optimisation in a claim's choice of candidates, which checks each again as it claims it
/// (`held_back`; the Postgres claim under the job's and the key's locks): the runs of a job
/// or key at its limit would fill a batch and be passed over, ahead of every other job, and
/// keep an idle dispatcher waking for runs it cannot claim.
const LIMITS_FREE: &str = "(jobhost_runs.job NOT IN (SELECT lj.name FROM jobhost_jobs lj \
        WHERE (lj.sequential = 1 OR lj.concurrency IS NOT NULL OR lj.rate_starts IS NOT NULL) \
        AND {held_back_of_job} IS NOT NULL) \
    AND (NOT EXISTS (SELECT 1 FROM jobhost_jobs kj WHERE kj.name = jobhost_runs.job \
            AND kj.key_by IS NOT NULL AND (kj.fifo = 1 OR kj.key_concurrency IS NOT NULL \
                OR kj.key_rate_starts IS NOT NULL)) \
        OR {held_back} IS NULL))";

/// The SQLite twin of `jobhost_held_back` (`migrations/postgres/functions/held_back.sql`,
/// which says what each answer means): why queued run `{run}` may not start now, or NULL.
const HELD_BACK_SQLITE: &str = "(SELECT CASE \
    WHEN (j.sequential = 1 OR j.concurrency IS NOT NULL) \
        AND (SELECT COUNT(*) FROM jobhost_runs o WHERE o.job = {run}.job \
            AND o.status = 'running' AND o.id IS NOT {run}.id) >= COALESCE(j.concurrency, 1) \
        THEN 'concurrency' \
    WHEN j.rate_starts IS NOT NULL \
        AND (SELECT COUNT(*) FROM jobhost_rate_starts s WHERE s.job = {run}.job \
            AND s.scope = 0 AND s.key = '' AND s.at > {now} - j.rate_period_ms) >= j.rate_starts \
        THEN 'rate' \
    WHEN {run}.limit_key IS NOT NULL AND j.key_by IS NOT NULL AND ( \
        ((j.fifo = 1 OR j.key_concurrency IS NOT NULL) \
            AND (SELECT COUNT(*) FROM jobhost_runs o WHERE o.job = {run}.job \
                AND o.limit_key = {run}.limit_key AND o.status = 'running' AND o.id IS NOT {run}.id) \
            >= CASE WHEN j.fifo = 1 THEN 1 ELSE j.key_concurrency END) \
        OR (j.fifo = 1 AND EXISTS (SELECT 1 FROM jobhost_runs o WHERE o.job = {run}.job \
            AND o.limit_key = {run}.limit_key AND o.status = 'queued' \
            AND (o.created_at < {run}.created_at \
                OR (o.created_at = {run}.created_at AND o.id < {run}.id)))) \
        OR (j.key_rate_starts IS NOT NULL \
            AND (SELECT COUNT(*) FROM jobhost_rate_starts s WHERE s.job = {run}.job \
                AND s.scope = 1 AND s.key = {run}.limit_key \
                AND s.at > {now} - j.key_rate_period_ms) >= j.key_rate_starts)) \
        THEN 'key' \
    END FROM jobhost_jobs j WHERE j.name = {run}.job)";

/// Whether a new run of job `$2` for tenant `$4` is over the job's `max_per_tenant`: the
/// job's `over_limit` (`skip` or `defer`) if it is, NULL if not (or the job has no cap).
/// The one place the cap is checked as runs are queued; a claim checks a deferred run's
/// slot again (`slot_taken`, and the Postgres claim of migration 0010). Queued runs that
/// wait for a slot count too, so a new run never overtakes them.
const OVER_LIMIT: &str = "(SELECT CASE WHEN j.max_per_tenant IS NOT NULL \
        AND {active_runs} >= j.max_per_tenant THEN j.over_limit END AS over \
    FROM (SELECT 1 AS one) x LEFT JOIN jobhost_jobs j ON j.name = $2)";

/// The columns a queued run is inserted with, and their values (`$1`..`$12`, and `o.over`
/// of [`OVER_LIMIT`]): a run over its job's cap is recorded skipped with code
/// `tenant_limit` (policy `skip`), or queued waiting for a slot (policy `defer`).
const QUEUE_RUN: &str = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, \
        status, cursor, component_digest, scheduled_for, rerun_of, next_attempt_at, created_at, \
        updated_at, waiting, last_code, finished_at, trace_parent) \
    SELECT $1, $2, $3, $4, $5, $6, CASE WHEN o.over = 'skip' THEN 'skipped' ELSE 'queued' END, \
        $7, $8, $9, $10, {now} + $11, {now}, {now}, CASE WHEN o.over = 'defer' THEN 1 ELSE 0 END, \
        CASE WHEN o.over = 'skip' THEN 'tenant_limit' END, \
        CASE WHEN o.over = 'skip' THEN {now} END, $12 \
    FROM {over_limit} o WHERE 1 = 1";

/// A run's status as shown (`RunRecord::shown_status`).
const SHOWN_STATUS: &str = "CASE WHEN status = 'queued' AND ((wait_policy IS NOT NULL \
    AND wait_pass < pass) OR (signal_name IS NOT NULL AND signal_pass = pass - 1)) \
    THEN 'waiting' \
    WHEN status = 'running' AND guest_started_at IS NULL THEN 'claimed' ELSE status END";

/// The (unaliased) run sleeps waiting for a signal of the name it waits for that is
/// stored and unread (`store::signals`).
const SIGNAL_SLEEPER: &str = "status = 'queued' AND signal_name IS NOT NULL \
    AND signal_pass = pass - 1 AND EXISTS (SELECT 1 FROM jobhost_signals s \
        WHERE s.run_id = jobhost_runs.id AND s.name = jobhost_runs.signal_name AND s.pass IS NULL)";

/// The attempt whose fence is `$1`..`$4` holds its lease.
const LEASE_HELD: &str = "EXISTS (SELECT 1 FROM jobhost_leases WHERE {fence_match})";

/// The lease row (of the unaliased `jobhost_leases`) is parked for its holder: a run queued
/// for a retry, its next pass or after a give-back, at the lease's generation. It stays
/// that run's past its hold, however late a busy fleet claims it: another run of the
/// instance never takes it (a kick folds into its pending flag instead), so a retry never
/// loses its lease to a kick that came while it waited. Not `host run`'s own runs (origin
/// `manual`): they belong to their process, and surveillance calls them crashed once their
/// lease expires. The Postgres claim (migration 0011) has the same condition.
const PARKED: &str = "EXISTS (SELECT 1 FROM jobhost_runs h WHERE h.id = jobhost_leases.holder \
    AND h.status = 'queued' AND h.origin <> 'manual' AND h.generation = jobhost_leases.generation)";

/// The run listing's filter: job `$1`, statuses `$2` (a JSON array), created in [`$3`,
/// `$4`), tenant `$5`, last code `$6`, instance `$7`, last error containing `$8` (a `LIKE`
/// lower-case text), and with `$9` = 1 only runs no operator retried yet. The text is found
/// by its position, not `LIKE '%text%'`: Postgres guesses such a `LIKE` rare and read and
/// sorted every run (123 ms at a million) instead of reading the creation index in order
/// until a page matched (6 ms; `cargo bench -p jobhost --bench console`).
/// Of a run the run filter matched: it ended, and every ending it delivers was delivered.
const PURGEABLE: &str = "AND status NOT IN ('queued', 'running') \
    AND NOT EXISTS (SELECT 1 FROM jobhost_deliveries d \
        WHERE d.run_id = jobhost_runs.id AND d.state = 'pending')";

const RUN_FILTER: &str = "($1 IS NULL OR job = $1) AND ($2 IS NULL OR status IN {json_strings_2}) \
    AND ($3 IS NULL OR created_at >= $3) AND ($4 IS NULL OR created_at < $4) \
    AND ($5 IS NULL OR tenant = $5) AND ($6 IS NULL OR last_code = $6) \
    AND ($7 IS NULL OR instance = $7) \
    AND ($8 IS NULL OR {text_position}(lower(last_error), $8) > 0) \
    AND ($9 = 0 OR retried_by IS NULL)";

impl Dialect {
    pub(crate) fn render(&self, template: &str) -> String {
        self.render_unmarked(
            template
                .replace("{run_filter}", RUN_FILTER)
                .replace("{purgeable}", PURGEABLE)
                .replace("{text_position}", self.text_position)
                .replace("{shown_status}", SHOWN_STATUS)
                .replace("{signal_sleeper}", SIGNAL_SLEEPER)
                .replace("{lease_held}", LEASE_HELD)
                .replace("{parked}", PARKED)
                .replace(
                    "{limits_free}",
                    &LIMITS_FREE
                        .replace("{held_back}", &self.held_back("jobhost_runs"))
                        .replace("{held_back_of_job}", &self.held_back_of_job("lj.name")),
                )
                .replace("{held_back:r}", &self.held_back("r"))
                .replace("{queue_run}", QUEUE_RUN)
                .replace("{over_limit}", OVER_LIMIT)
                .replace("{active_runs}", self.active_runs)
                .replace("{random_unit}", self.random_unit)
                .replace("{by_tenant_index}", self.by_tenant_index)
                .replace("{manual_queued_index}", self.manual_queued_index)
                .replace("{queue_order}", self.queue_order)
                .replace("{queue_position_2}", self.queue_position_2)
                .replace("{queue_position}", self.queue_position)
                .replace("{fence_match}", FENCE_MATCH)
                .replace("{file_upsert}", FILE_UPSERT)
                .replace(
                    "{file_within_quota}",
                    &file_within_quota("$1", "$2", "$5", "$9", "$10"),
                )
                .replace(
                    "{file_within_quota_fenced}",
                    &file_within_quota("$5", "$6", "$9", "$13", "$14"),
                )
                .replace("{now}", self.now)
                .replace("{skip_locked}", self.skip_locked)
                .replace("{json_ids}", self.json_ids)
                .replace("{json_guest_starts}", self.json_guest_starts)
                .replace("{row_id}", self.row_id)
                .replace("{json_strings_2}", &self.json_ids.replace("$1", "$2"))
                .replace("{for_update}", self.for_update)
                .replace("{run_columns}", RUN_COLUMNS)
                .replace("{job_columns}", JOB_COLUMNS)
                .replace("{lease_columns}", LEASE_COLUMNS)
                .replace("{attempt_columns}", ATTEMPT_COLUMNS)
                .replace("{report_columns}", REPORT_COLUMNS)
                .replace("{file_columns}", FILE_COLUMNS),
        )
    }

    /// Why queued run `run` (a table or alias of `jobhost_runs`) may not start now
    /// (`concurrency`, `rate`, `key`), or NULL: the claim's limits, checked on read.
    fn held_back(&self, run: &str) -> String {
        self.held_back.replace("{run}", run)
    }

    /// Why no run of job `job` (an expression) may start now by the limits of the whole
    /// job, or NULL: [`Dialect::held_back`] of a run with no id, key or queue time.
    fn held_back_of_job(&self, job: &str) -> String {
        self.held_back
            .replace("{run}.job", job)
            .replace("{run}.id", "NULL")
            .replace("{run}.limit_key", "NULL")
            .replace("{run}.created_at", "NULL")
    }

    /// Renders each `{unmarked:X}` of `sql`.
    fn render_unmarked(&self, mut sql: String) -> String {
        while let Some(start) = sql.find("{unmarked:") {
            let end = start + sql[start..].find('}').expect("an {unmarked:X} token ends");
            let run = &sql[start + "{unmarked:".len()..end];
            let rendered = self
                .unmarked
                .map_or_else(String::new, |f| format!("{f}({run})"));
            sql.replace_range(start..=end, &rendered);
        }
        sql
    }
}

/// Declares `$set`, the rendered statements of one dialect, one field each; the claims
/// module declares its own set with it (`claims::statements`).
macro_rules! statements {
    ($set:ident; $($name:ident = $sql:expr;)*) => {
        /// The rendered statements of one dialect.
        pub(crate) struct $set {
            $(pub $name: String,)*
        }

        impl $set {
            pub(crate) fn render(dialect: &$crate::store::queries::Dialect) -> $set {
                $set { $($name: dialect.render($sql),)* }
            }

            #[cfg(test)]
            fn all(&self) -> Vec<&str> {
                vec![$(self.$name.as_str(),)*]
            }
        }
    };
}
pub(crate) use statements;

statements! {
    Queries;

    now = "SELECT {now}";

    upsert_job = "INSERT INTO jobhost_jobs (name, tenant, component_path, component_digest, spec, \
        schedule, next_fire_at, per_tenant, sequential, max_per_tenant, over_limit, registered_at, \
        updated_at, concurrency, rate_starts, rate_period_ms, key_by, key_concurrency, \
        key_rate_starts, key_rate_period_ms, fifo) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {now}, {now}, $12, $13, $14, $15, \
            $16, $17, $18, $19) \
        ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, \
        per_tenant = excluded.per_tenant, sequential = excluded.sequential, \
        max_per_tenant = excluded.max_per_tenant, over_limit = excluded.over_limit, \
        concurrency = excluded.concurrency, rate_starts = excluded.rate_starts, \
        rate_period_ms = excluded.rate_period_ms, key_by = excluded.key_by, \
        key_concurrency = excluded.key_concurrency, key_rate_starts = excluded.key_rate_starts, \
        key_rate_period_ms = excluded.key_rate_period_ms, fifo = excluded.fifo, \
        orphaned_at = NULL, \
        component_path = excluded.component_path, component_digest = excluded.component_digest, \
        spec = excluded.spec, updated_at = excluded.updated_at, \
        next_fire_at = CASE WHEN jobhost_jobs.schedule IS NOT DISTINCT FROM excluded.schedule \
            THEN jobhost_jobs.next_fire_at ELSE excluded.next_fire_at END, \
        schedule = excluded.schedule \
        RETURNING {job_columns}";
    get_job = "SELECT {job_columns} FROM jobhost_jobs WHERE name = $1";
    // Of queued run `$1`: whether it waits for a `max_per_tenant` slot, and what claim
    // limit holds it back now (`queue::waits`).
    run_hold = "SELECT r.waiting, {held_back:r} FROM jobhost_runs r \
        WHERE r.id = $1 AND r.status = 'queued'";
    list_jobs = "SELECT {job_columns} FROM jobhost_jobs ORDER BY name";
    // The component a serving host compiles for job `$1` (`$2`, a digest; NULL: none),
    // and whether that compile is still under way for the job's current component.
    set_compiling = "UPDATE jobhost_jobs SET compiling_digest = $2 WHERE name = $1";
    compiled = "UPDATE jobhost_jobs SET compiling_digest = NULL \
        WHERE name = $1 AND compiling_digest = $2";
    job_compiling = "SELECT 1 FROM jobhost_jobs WHERE name = $1 \
        AND compiling_digest = component_digest";
    advance_schedule = "UPDATE jobhost_jobs SET next_fire_at = $3, updated_at = {now} \
        WHERE name = $1 AND next_fire_at IS NOT DISTINCT FROM $2";
    mark_missed = "UPDATE jobhost_jobs SET missed_reported_at = {now} WHERE name = $1 \
        AND missed_reported_at IS NOT DISTINCT FROM $2";

    insert_run = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
        cursor, component_digest, scheduled_for, rerun_of, next_attempt_at, created_at, updated_at, \
        trace_parent) \
        VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, $10, {now} + $11, {now}, {now}, $12) \
        RETURNING {run_columns}";
    // New work (a kick or a start), under its job's `max_per_tenant`.
    queue_run = "{queue_run} RETURNING {run_columns}";
    // The same with a derived id (a schedule fire, a fan-out's child, an event's run, a
    // boot run): inserted a second time, it changes nothing.
    insert_run_once = "{queue_run} ON CONFLICT (id) DO NOTHING RETURNING {run_columns}";
    // Guests that started (`$1`: `[run, generation, at]` triples): each run still running
    // that attempt shows its start, and keeps its first as its own.
    mark_guests_started = "UPDATE jobhost_runs SET guest_started_at = s.at, \
        started_at = COALESCE(jobhost_runs.started_at, s.at) \
        FROM {json_guest_starts} s \
        WHERE jobhost_runs.id = s.id AND jobhost_runs.status = 'running' \
        AND jobhost_runs.generation = s.generation AND jobhost_runs.guest_started_at IS NULL";
    // Of the runs of the jobs in the JSON array `$1` (a lane's): the first due of those no
    // limit holds, or the moment a rate's window next drops a start, whichever is sooner.
    // The first is the first in due order, so a check per run stops there.
    next_due_in = "SELECT MIN(due) - {now} FROM ( \
        SELECT (SELECT next_attempt_at FROM jobhost_runs \
            WHERE status = 'queued' AND origin <> 'manual' AND job IN {json_ids} \
            AND {limits_free} ORDER BY next_attempt_at LIMIT 1) AS due \
        UNION ALL \
        SELECT MIN(s.at + CASE WHEN s.scope = 0 THEN j.rate_period_ms \
            ELSE j.key_rate_period_ms END) AS due \
        FROM jobhost_rate_starts s JOIN jobhost_jobs j ON j.name = s.job \
        WHERE s.job IN {json_ids} AND s.at + CASE WHEN s.scope = 0 THEN j.rate_period_ms \
            ELSE j.key_rate_period_ms END > {now}) x";
    // The due runs of jobs with claim limits that a limit holds, by job and limit, among
    // the `$1` oldest.
    held_runs = "SELECT job, held, COUNT(*) FROM (SELECT r.job, {held_back:r} AS held \
        FROM jobhost_runs r WHERE r.status = 'queued' AND r.origin <> 'manual' \
        AND r.next_attempt_at <= {now} AND r.job IN (SELECT name FROM jobhost_jobs \
            WHERE sequential = 1 OR concurrency IS NOT NULL OR rate_starts IS NOT NULL \
            OR key_by IS NOT NULL) \
        ORDER BY r.next_attempt_at LIMIT $1) h WHERE held IS NOT NULL GROUP BY job, held";
    queue_lag = "SELECT COUNT(*), COALESCE({now} - MIN(next_attempt_at), 0) FROM jobhost_runs \
        WHERE status = 'queued' AND next_attempt_at <= {now}";
    // Tenant `$1`'s queued runs, counted up to `$3`, and job `$2`'s for it, up to `$4`
    // (`backlog`): each an index walk no longer than its cap. The job's repeats the
    // predicate of `jobhost_runs_live` word for word, so SQLite uses that index too.
    queued_counts = "SELECT \
        (SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE tenant = $1 AND status = 'queued' \
            LIMIT $3) t), \
        (SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE job = $2 AND tenant = $1 \
            AND status IN ('queued', 'running') AND status = 'queued' LIMIT $4) j)";
    // How many ancestors run `$1` has (its parent, the parent's parent ...), counted up
    // to `$2` and one more: a primary-key read each.
    family_depth = "WITH RECURSIVE up (id, depth) AS ( \
            SELECT parent_run, CAST(1 AS BIGINT) FROM jobhost_runs WHERE id = $1 \
            UNION ALL SELECT r.parent_run, up.depth + 1 FROM jobhost_runs r JOIN up ON r.id = up.id \
                WHERE up.depth <= CAST($2 AS BIGINT)) \
        SELECT CAST(COALESCE(MAX(depth), 0) AS BIGINT) FROM up WHERE id IS NOT NULL";
    // Each tenant's queued runs (metrics, the console).
    queued_by_tenant = "SELECT tenant, COUNT(*) FROM jobhost_runs WHERE status = 'queued' \
        GROUP BY tenant ORDER BY tenant";
    // By tenant and job: the host sums the jobs of each lane.
    queue_lag_by_tenant_and_job = "SELECT tenant, job, COUNT(*), \
        COALESCE({now} - MIN(next_attempt_at), 0) \
        FROM jobhost_runs WHERE status = 'queued' AND next_attempt_at <= {now} \
        GROUP BY tenant, job ORDER BY tenant, job";
    // Runs waiting for a slot of their job's `max_per_tenant` now, and the waits and
    // guest defers of every run kept.
    deferrals = "SELECT \
        CAST(COALESCE(SUM(CASE WHEN status = 'queued' AND waiting = 1 THEN 1 ELSE 0 END), 0) AS BIGINT), \
        CAST(COALESCE(SUM(slot_waits), 0) AS BIGINT), CAST(COALESCE(SUM(defers), 0) AS BIGINT) \
        FROM jobhost_runs";
    // What each tenant's attempts that ended in the last `$1` ms used (quotas).
    tenant_usage = "SELECT r.tenant, CAST(COALESCE(SUM(a.fuel_used), 0) AS BIGINT) AS fuel_used, \
        CAST(COALESCE(SUM(a.duration_ms), 0) AS BIGINT) AS wall_ms, COUNT(*) AS attempts \
        FROM jobhost_attempts a JOIN jobhost_runs r ON r.id = a.run_id \
        WHERE a.finished_at > {now} - $1 GROUP BY r.tenant ORDER BY r.tenant";
    get_run = "SELECT {run_columns} FROM jobhost_runs WHERE id = $1";
    // Newest first, a page after the run created at `$10` with id `$11` (the first page:
    // after the largest time), `$12` of them. A row-value bound, always given, is a range
    // of the indexes by `(…, created_at, id)` (migration 0022): a deep page reads its
    // page, not every run before it.
    list_runs = "SELECT {run_columns} FROM jobhost_runs WHERE {run_filter} \
        AND (created_at, id) < ($10, $11) \
        ORDER BY created_at DESC, id DESC LIMIT $12";
    // How many runs the filter matches, counted up to `$10`.
    count_matching_runs = "SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE {run_filter} \
        LIMIT $10) c";
    // A queued run that sleeps until its children ended counts as `waiting`.
    count_runs = "SELECT {shown_status}, COALESCE(last_code, ''), COUNT(*) FROM jobhost_runs \
        GROUP BY {shown_status}, COALESCE(last_code, '')";
    skip_run = "UPDATE jobhost_runs SET status = 'skipped', last_error = $2, \
        finished_at = {now}, updated_at = {now} WHERE id = $1 AND status = 'running'";
    // A kick folded into the holder's pending flag is not a run: its row goes. One a
    // guest's pass started stays (skipped): a retry of that pass finds it there.
    forget_folded_kick = "DELETE FROM jobhost_runs WHERE id = $1 AND status = 'running' \
        AND parent_run IS NULL";
    list_attempts = "SELECT {attempt_columns} FROM jobhost_attempts WHERE run_id = $1 \
        ORDER BY seq DESC LIMIT $2";
    // Running runs, and manual runs waiting in the queue (a retry or the next pass of a
    // `host run`): both belong to a host, and lose it when their lease expires. One
    // branch each, so each reads only its own runs by an index (migration 0018): as one
    // condition with an `OR`, the planner read every queued run, or the whole table.
    lost_runs = "SELECT r.id, r.job, r.instance, r.generation FROM ( \
        SELECT id, job, instance, generation FROM jobhost_runs \
            WHERE status = 'running' AND updated_at <= {now} - $1 \
        UNION ALL \
        SELECT id, job, instance, generation FROM jobhost_runs {manual_queued_index} \
            WHERE status = 'queued' AND origin = 'manual' AND updated_at <= {now} - $1) r \
        WHERE NOT EXISTS (SELECT 1 FROM jobhost_leases l WHERE l.job = r.job \
            AND l.instance = r.instance AND l.holder = r.id AND l.expires_at > {now})";
    // `$3`: the rerun that resumes it, if any (it takes the run's ledger).
    mark_crashed = "UPDATE jobhost_runs SET status = 'crashed', last_code = 'crashed', \
        resumed_by = $3, finished_at = {now}, updated_at = {now} \
        WHERE id = $1 AND (status = 'running' OR (status = 'queued' AND origin = 'manual')) \
        AND updated_at <= {now} - $2 \
        AND NOT EXISTS (SELECT 1 FROM jobhost_leases l WHERE l.job = jobhost_runs.job \
            AND l.instance = jobhost_runs.instance AND l.holder = $1 AND l.expires_at > {now})";
    // The attempt a crashed run was running, recorded as it is found (a running attempt
    // has no row of its own); nothing if the run was not running one.
    record_crashed_attempt = "INSERT INTO jobhost_attempts (run_id, seq, pass, attempt, \
        generation, host, status, code, log, log_truncated, started_at, finished_at) \
        SELECT id, attempts, pass, failures + 1, generation, COALESCE(host, ''), 'crashed', \
        'crashed', '', 0, COALESCE(guest_started_at, updated_at), {now} FROM jobhost_runs \
        WHERE id = $1 AND status = 'running' AND generation IS NOT NULL AND attempts > 0 \
        ON CONFLICT (run_id, seq) DO NOTHING";
    lease_holder = "SELECT holder, pending FROM jobhost_leases \
        WHERE job = $1 AND instance = $2 {for_update}";
    release_lost_lease = "UPDATE jobhost_leases SET holder = NULL, pending = 0, \
        deadline_at = {now}, expires_at = {now}, updated_at = {now} \
        WHERE job = $1 AND instance = $2 AND holder = $3";
    count_reruns = "SELECT COUNT(*) FROM jobhost_runs WHERE rerun_of = $1";
    // Up to `$1` rows of the rates' windows that no window holds any more: older than
    // their job's period for their scope (`0`: the job's rate, `1`: a key's), or of a job
    // with no such rate now. Rows another transaction holds are left for the next pass.
    prune_rate_starts = "DELETE FROM jobhost_rate_starts WHERE {row_id} IN ( \
        SELECT s.{row_id} FROM jobhost_rate_starts s \
        WHERE s.at <= {now} - COALESCE((SELECT CASE WHEN s.scope = 0 THEN j.rate_period_ms \
            ELSE j.key_rate_period_ms END FROM jobhost_jobs j WHERE j.name = s.job), 0) \
        LIMIT $1 {skip_locked})";
    // The operator's controls (migration 0022).
    list_pauses = "SELECT scope, name, paused_at FROM jobhost_pauses ORDER BY scope, name";
    pause = "INSERT INTO jobhost_pauses (scope, name, paused_at) VALUES ($1, $2, {now}) \
        ON CONFLICT (scope, name) DO NOTHING";
    unpause = "DELETE FROM jobhost_pauses WHERE scope = $1 AND name = $2";
    // The attempt a cancelled run was running, recorded as the cancel found it; the
    // attempt's own ending, if its host records one, completes the row.
    record_cancelled_attempt = "INSERT INTO jobhost_attempts (run_id, seq, pass, attempt, \
        generation, host, status, code, log, log_truncated, started_at, finished_at) \
        SELECT id, attempts, pass, failures + 1, generation, COALESCE(host, ''), 'cancelled', \
        $3, '', 0, COALESCE(guest_started_at, updated_at), {now} FROM jobhost_runs \
        WHERE id = $1 AND status = 'running' AND generation IS NOT NULL AND attempts > 0 \
        AND ($2 IS NULL OR tenant = $2) \
        ON CONFLICT (run_id, seq) DO NOTHING";
    // Only a queued or running run of tenant `$2` (any, if null) is ended, with status `$3`
    // and code `$4` (an operator's cancel, or a family's ending: `crate::runs::family`).
    cancel_run = "UPDATE jobhost_runs SET status = $3, \
        last_code = $4, finished_at = {now}, updated_at = {now} \
        WHERE id = $1 AND status IN ('queued', 'running') AND ($2 IS NULL OR tenant = $2) \
        RETURNING {run_columns}";
    // The cancelled run's lease, if it holds it: released and moved to the next
    // generation, with its deadline now, so no write of the attempt commits afterwards.
    fence_off_lease = "UPDATE jobhost_leases SET generation = generation + 1, holder = NULL, \
        pending = 0, deadline_at = {now}, expires_at = {now}, updated_at = {now} \
        WHERE job = $1 AND instance = $2 AND holder = $3";
    // A retry: the original names it, once, if it ended failed, crashed or cancelled and
    // belongs to tenant `$3` (any, if null).
    mark_retried = "UPDATE jobhost_runs SET retried_by = $2, updated_at = {now} \
        WHERE id = $1 AND retried_by IS NULL AND status IN ('failed', 'crashed', 'cancelled') \
        AND ($3 IS NULL OR tenant = $3)";
    // The retry resumes where the original's last committed pass left it: its pass and
    // counters (the cursor comes with the new run), and, below, the pass's ledger.
    resume_retry = "UPDATE jobhost_runs SET retry_of = $2, \
        (pass, counters, work_done, signal_name, signal_pass) = \
        (SELECT pass, counters, work_done, signal_name, signal_pass FROM jobhost_runs \
            WHERE id = $2) WHERE id = $1 \
        RETURNING {run_columns}";
    // The console (`http::dashboard`). Runs created since `$1` that ended, by status and by
    // when they ended, in buckets of `$2` ms; of tenant `$3` (any, if null). Read by the
    // creation index: a run created before the window is not counted.
    ended_by_bucket = "SELECT CAST(COALESCE(finished_at, created_at) / $2 AS BIGINT) * $2 AS t, \
        status, COUNT(*) FROM jobhost_runs WHERE created_at >= $1 \
        AND status NOT IN ('queued', 'running') AND ($3 IS NULL OR tenant = $3) \
        GROUP BY 1, 2 ORDER BY 1, 2";
    // Failed and crashed runs created since `$1`, by code and by when they ended, in
    // buckets of `$2` ms; of tenant `$3` (any, if null). The same index as `ended_by_bucket`.
    failures_by_bucket = "SELECT CAST(COALESCE(finished_at, created_at) / $2 AS BIGINT) * $2 AS t, \
        COALESCE(last_code, ''), COUNT(*) FROM jobhost_runs WHERE created_at >= $1 \
        AND status IN ('failed', 'crashed') AND ($3 IS NULL OR tenant = $3) \
        GROUP BY 1, 2 ORDER BY 1, 2";
    // Failed and crashed runs created since `$1`, by job and code, most first.
    failures_by_job = "SELECT job, COALESCE(last_code, ''), COUNT(*), MAX(COALESCE(finished_at, \
        created_at)) FROM jobhost_runs WHERE created_at >= $1 AND status IN ('failed', 'crashed') \
        AND ($2 IS NULL OR tenant = $2) GROUP BY job, COALESCE(last_code, '') \
        ORDER BY 3 DESC, 1 LIMIT 50";
    // The ended runs of job `$1` created since `$2` (of tenant `$3`), newest first, `$4` at
    // most: when each ended, its status and how long it ran.
    job_endings = "SELECT COALESCE(finished_at, created_at), status, \
        CASE WHEN started_at IS NULL OR finished_at IS NULL THEN NULL \
            ELSE finished_at - started_at END \
        FROM jobhost_runs WHERE job = $1 AND created_at >= $2 \
        AND status NOT IN ('queued', 'running') AND ($3 IS NULL OR tenant = $3) \
        ORDER BY created_at DESC LIMIT $4";
    // Queued and running runs, the newest run's creation and the latest live log line:
    // what the console's live updates watch.
    live_counts = "SELECT \
        (SELECT COUNT(*) FROM jobhost_runs WHERE status = 'queued'), \
        (SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running' \
            AND guest_started_at IS NOT NULL), \
        (SELECT COALESCE(MAX(created_at), 0) FROM jobhost_runs), \
        (SELECT COALESCE(MAX(updated_at), 0) FROM jobhost_live_logs)";
    // The objects run `$1` attached that its names still point at, the latest first.
    run_files = "SELECT {file_columns} FROM jobhost_files WHERE run_id = $1 \
        ORDER BY created_at DESC, collection, name LIMIT $2";
    // Jobs that start jobs (`store::family`). The parent `$1` runs pass `$3` at generation
    // `$2`: a guest's enqueue inserts nothing otherwise.
    parent_running = "SELECT 1 FROM jobhost_runs WHERE id = $1 AND status = 'running' \
        AND generation = $2 AND pass = $3";
    // A run a guest's call queues; one whose id exists already is left alone. Under its
    // job's `max_per_tenant` as new work is (`{over_limit}`, `queue_run`): skipped or
    // waiting for a slot over it. Postgres' `jobhost_enqueue_run` is its twin.
    insert_child_run = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, \
        status, next_attempt_at, created_at, updated_at, trace_parent, parent_run, \
        parent_attempt, parent_pass, detached, event, waiting, last_code, finished_at) \
        SELECT $1, $2, $3, $4, $5, $6, CASE WHEN o.over = 'skip' THEN 'skipped' ELSE 'queued' END, \
        {now} + $7, {now}, {now}, $8, $9, $10, $11, $12, $13, \
        CASE WHEN o.over = 'defer' THEN 1 ELSE 0 END, \
        CASE WHEN o.over = 'skip' THEN 'tenant_limit' END, \
        CASE WHEN o.over = 'skip' THEN {now} END \
        FROM {over_limit} o WHERE 1 = 1 ON CONFLICT (id) DO NOTHING RETURNING {run_columns}";
    // A run a guest's call queued by an earlier attempt of its pass, named again.
    run_exists = "SELECT 1 FROM jobhost_runs WHERE id = $1";
    mark_family = "UPDATE jobhost_runs SET family = 1 WHERE id = $1 AND family = 0";
    // Fenced by `$1`..`$4`: the running run `$5` of that generation.
    set_result = "UPDATE jobhost_runs SET result = $6, updated_at = {now} \
        WHERE id = $5 AND status = 'running' AND generation = $3 AND {lease_held}";
    wait_for_children = "UPDATE jobhost_runs SET wait_pass = pass, wait_policy = $6, \
        family = 1, updated_at = {now} \
        WHERE id = $5 AND status = 'running' AND generation = $3 AND {lease_held}";
    children_page = "SELECT id, job, instance, status, last_code, result FROM jobhost_runs \
        WHERE parent_run = $1 AND parent_pass = $2 AND detached = 0 AND id > $3 \
        ORDER BY id LIMIT $4";
    children_tally = "SELECT status, COUNT(*) FROM jobhost_runs \
        WHERE parent_run = $1 AND parent_pass = $2 AND detached = 0 GROUP BY status";
    family_rows = "SELECT id, status, pass, wait_pass, wait_policy FROM jobhost_runs \
        WHERE family = 1 ORDER BY id LIMIT $1";
    unfinished_children = "SELECT {run_columns} FROM jobhost_runs \
        WHERE parent_run = $1 AND detached = 0 AND status IN ('queued', 'running') LIMIT $2";
    // A waiting run sleeps queued, its pass ended, due at no time: woken, it is due now.
    // Setting its status (to what it is) fires Postgres' notification of a queued run, so
    // idle hosts claim it at once rather than at their next poll.
    wake_parent = "UPDATE jobhost_runs SET status = 'queued', wait_policy = NULL, \
        next_attempt_at = {now}, \
        updated_at = {now} WHERE id = $1 AND status = 'queued' AND wait_policy IS NOT NULL \
        AND wait_pass < pass";
    // Only an ended run (a live one may start more children), and one that takes its
    // children with it (`family::takes_children`: failed, crashed, cancelled) only once no
    // attached child is left unfinished: checked as it is written, since the sweep read
    // the run before, maybe while it still ran.
    family_settled = "UPDATE jobhost_runs SET family = 0 \
        WHERE id = $1 AND status NOT IN ('queued', 'running') \
        AND (status NOT IN ('failed', 'crashed', 'cancelled') OR NOT EXISTS ( \
            SELECT 1 FROM jobhost_runs c WHERE c.parent_run = $1 AND c.detached = 0 \
                AND c.status IN ('queued', 'running')))";
    // The running runs among `$1` that are cancelled, with their codes (a host's attempts
    // to stop, and why).
    cancelled_among = "SELECT id, last_code FROM jobhost_runs WHERE id IN {json_ids} AND status = 'cancelled'";
    // Retention: finished runs created before the cut-off, oldest first (never a queued or
    // running one), then their attempts, ledgers and rows; delivered reports.
    // A run whose ending a webhook has yet to get is kept until it is delivered or given up.
    old_runs = "SELECT id FROM jobhost_runs WHERE created_at < {now} - $1 \
        AND status NOT IN ('queued', 'running') \
        AND NOT EXISTS (SELECT 1 FROM jobhost_deliveries d \
            WHERE d.run_id = jobhost_runs.id AND d.state = 'pending') \
        ORDER BY created_at LIMIT $2";
    // What a purge by filter (`$1`..`$9`) deletes, `$10` at most: ended runs whose
    // endings were delivered (as retention deletes), oldest first.
    purgeable_runs = "SELECT id FROM jobhost_runs WHERE {run_filter} {purgeable} \
        ORDER BY created_at, id LIMIT $10";
    count_purgeable = "SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE {run_filter} \
        {purgeable} LIMIT $10) c";
    prune_attempts = "DELETE FROM jobhost_attempts WHERE run_id IN {json_ids}";
    prune_steps = "DELETE FROM jobhost_steps WHERE run_id IN {json_ids}";
    prune_step_failures = "DELETE FROM jobhost_step_failures WHERE run_id IN {json_ids}";
    prune_journals = "DELETE FROM jobhost_journals WHERE run_id IN {json_ids}";
    prune_live_logs = "DELETE FROM jobhost_live_logs WHERE run_id IN {json_ids}";
    prune_delivery_attempts = "DELETE FROM jobhost_delivery_attempts WHERE delivery_id IN \
        (SELECT id FROM jobhost_deliveries WHERE run_id IN {json_ids})";
    prune_deliveries = "DELETE FROM jobhost_deliveries WHERE run_id IN {json_ids}";
    prune_signals = "DELETE FROM jobhost_signals WHERE run_id IN {json_ids}";
    prune_runs = "DELETE FROM jobhost_runs WHERE id IN {json_ids} \
        AND status NOT IN ('queued', 'running')";
    // An orphaned job once it has no runs left (and its leases).
    prune_orphan_leases = "DELETE FROM jobhost_leases WHERE job IN (SELECT name FROM jobhost_jobs \
        WHERE orphaned_at < {now} - $1 AND NOT EXISTS (SELECT 1 FROM jobhost_runs r WHERE r.job = name))";
    // Leases of a job's instances that nothing has held since the cut-off and no queued or
    // running run needs: each instance a kick or a start ever named leaves one, and a
    // claim makes a lease anew (at generation 1) when it finds none. The holder is
    // checked again as each row is deleted, so one a claim took meanwhile is kept.
    prune_idle_leases = "DELETE FROM jobhost_leases WHERE holder IS NULL AND pending = 0 \
        AND (job, instance) IN (SELECT l.job, l.instance FROM jobhost_leases l \
            WHERE l.holder IS NULL AND l.pending = 0 AND l.updated_at < {now} - $1 \
            AND l.job IN (SELECT name FROM jobhost_jobs) \
            AND NOT EXISTS (SELECT 1 FROM jobhost_runs r WHERE r.job = l.job \
                AND r.instance = l.instance AND r.status IN ('queued', 'running')) \
            LIMIT $2)";
    prune_orphans = "DELETE FROM jobhost_jobs WHERE orphaned_at < {now} - $1 \
        AND NOT EXISTS (SELECT 1 FROM jobhost_runs r WHERE r.job = name)";
    prune_reports = "DELETE FROM jobhost_reports WHERE id IN (SELECT id FROM jobhost_reports \
        WHERE delivered_at IS NOT NULL AND created_at < {now} - $1 ORDER BY id LIMIT $2)";
    // `host drive`'s candidates: due runs in claim order, a page after the last one seen
    // (its due time `$1` and position `$2`).
    due_candidates = "SELECT id, job, next_attempt_at, tenant, {queue_position} AS position \
        FROM jobhost_runs \
        WHERE status = 'queued' AND origin <> 'manual' AND next_attempt_at <= {now} \
        AND {limits_free} \
        AND (next_attempt_at > $1 OR (next_attempt_at = $1 AND {queue_order} > {queue_position_2})) \
        ORDER BY next_attempt_at, {queue_order} LIMIT $3";
    // Start-or-join: the lease row (created free if there is none) is locked first, so
    // starts of one job and instance take turns; then its live run, if any.
    ensure_lease = "INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
        expires_at, pending, updated_at) VALUES ($1, $2, 0, NULL, 0, 0, 0, {now}) \
        ON CONFLICT (job, instance) DO NOTHING";
    lock_lease = "SELECT generation FROM jobhost_leases WHERE job = $1 AND instance = $2 {for_update}";
    live_run = "SELECT id FROM jobhost_runs WHERE job = $1 AND instance = $2 \
        AND status IN ('queued', 'running') ORDER BY created_at, id LIMIT 1";
    // The status of each run in the JSON array `$1`: the runs clients wait for.
    run_states = "SELECT id, status FROM jobhost_runs WHERE id IN {json_ids}";
    // A unique key's row (migration 0030), taken: inserted naming run `$4`, or, if the
    // key has one, read back locked (on Postgres the upsert's row lock, held until the
    // enqueue commits, orders every enqueue of the key across hosts).
    take_unique_key = "INSERT INTO jobhost_unique_keys (job, tenant, key, run_id) \
        VALUES ($1, $2, $3, $4) ON CONFLICT (job, tenant, key) \
        DO UPDATE SET run_id = jobhost_unique_keys.run_id RETURNING run_id";
    name_unique_key = "UPDATE jobhost_unique_keys SET run_id = $4 \
        WHERE job = $1 AND tenant = $2 AND key = $3";
    // The run a unique key names, as `rules::enqueue::decide` reads it, and the time.
    unique_holder = "SELECT status, started_at, created_at, {now} FROM jobhost_runs WHERE id = $1";
    // A replace or a debounce of a run that has not started (none if a claim took it).
    replace_waiting = "UPDATE jobhost_runs SET payload = $2, updated_at = {now} \
        WHERE id = $1 AND status = 'queued' AND started_at IS NULL";
    debounce_waiting = "UPDATE jobhost_runs SET next_attempt_at = {now} + $2, updated_at = {now} \
        WHERE id = $1 AND status = 'queued' AND started_at IS NULL";
    // A start's own bound on its attempts a pass (`rules::enqueue::attempts_allowed`),
    // written with the run it created; and read by the runner when an attempt failed.
    set_max_attempts = "UPDATE jobhost_runs SET max_attempts = $2 WHERE id = $1";
    max_attempts = "SELECT max_attempts FROM jobhost_runs WHERE id = $1";
    // A rerun resumes where its crashed run was: the same pass, counters and ledger. The
    // ledger moves (the steps of the crashed run's pass, the only ones it has): it is kept
    // once, by the newest run, and the crashed run names its rerun (`resumed_by`).
    resume_rerun = "UPDATE jobhost_runs SET \
        (pass, counters, work_done, defers, signal_name, signal_pass) = \
        (SELECT pass, counters, work_done, defers, signal_name, signal_pass FROM jobhost_runs \
            WHERE id = $2) WHERE id = $1";
    move_ledger = "UPDATE jobhost_steps SET run_id = $1 WHERE run_id = $2 \
        AND pass = (SELECT pass FROM jobhost_runs WHERE id = $2)";
    // Its signals go with it: the unread ones, and those its pass read.
    move_signals = "UPDATE jobhost_signals SET run_id = $1 WHERE run_id = $2 \
        AND (pass IS NULL OR pass = (SELECT pass FROM jobhost_runs WHERE id = $2))";
    // The ledger of a run's pass, and of a run for operators.
    pass_steps = "SELECT name, result FROM jobhost_steps WHERE run_id = $1 AND pass = $2";
    run_steps = "SELECT pass, name, result, generation, recorded_at FROM jobhost_steps \
        WHERE run_id = $1 ORDER BY pass, recorded_at, name";
    record_step_fenced = "INSERT INTO jobhost_steps (run_id, pass, name, result, generation, recorded_at) \
        SELECT $5, $6, $7, $8, $3, {now} WHERE {lease_held}";
    // An attempt that failed after reaching step `$3` of pass `$2` of run `$1`, unless the
    // step is recorded (in a transaction that committed): one more failed attempt, and
    // its failure (`$4` code, `$5` message) the last.
    note_step_failure = "INSERT INTO jobhost_step_failures \
        (run_id, pass, name, attempts, last_code, last_error, failed_at) \
        SELECT $1, $2, $3, 1, $4, $5, {now} WHERE NOT EXISTS (SELECT 1 FROM jobhost_steps s \
            WHERE s.run_id = $1 AND s.pass = $2 AND s.name = $3) \
        ON CONFLICT (run_id, pass, name) DO UPDATE SET \
        attempts = jobhost_step_failures.attempts + 1, last_code = excluded.last_code, \
        last_error = excluded.last_error, failed_at = excluded.failed_at";
    // Live logs (`store::live_logs`): attempt `$2` of run `$1` started `$5` ms ago, its
    // lines so far `$3` and its fuel so far `$6` (replacing any other attempt's); or `$3`
    // appended to its lines so far, only while they are `$5` characters long (what the
    // host last wrote), with its fuel so far `$6`.
    put_live_log = "INSERT INTO jobhost_live_logs (run_id, seq, log, log_truncated, \
        started_at, updated_at, fuel_used) VALUES ($1, $2, $3, $4, {now} - $5, {now}, $6) \
        ON CONFLICT (run_id) DO UPDATE SET seq = excluded.seq, log = excluded.log, \
        log_truncated = excluded.log_truncated, started_at = excluded.started_at, \
        updated_at = excluded.updated_at, fuel_used = excluded.fuel_used";
    append_live_log = "UPDATE jobhost_live_logs SET log = log || $3, log_truncated = $4, \
        updated_at = {now}, fuel_used = $6 WHERE run_id = $1 AND seq = $2 AND length(log) = $5";
    live_log = "SELECT run_id, seq, log, log_truncated, started_at, updated_at, \
        {now} - started_at AS running_ms, fuel_used FROM jobhost_live_logs WHERE run_id = $1";
    drop_live_log = "DELETE FROM jobhost_live_logs WHERE run_id = $1 AND seq = $2";
    // The flight recorder: an attempt's journal (a seq reused by an attempt whose ending
    // was not recorded replaces the one before), and what a run has.
    put_journal = "INSERT INTO jobhost_journals \
        (run_id, seq, job, tenant, calls, bytes, replayable, body, recorded_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {now}) \
        ON CONFLICT (run_id, seq) DO UPDATE SET job = excluded.job, tenant = excluded.tenant, \
        calls = excluded.calls, bytes = excluded.bytes, replayable = excluded.replayable, \
        body = excluded.body, recorded_at = excluded.recorded_at";
    journal = "SELECT run_id, seq, job, tenant, calls, bytes, replayable, body, recorded_at \
        FROM jobhost_journals WHERE run_id = $1 AND seq = $2";
    last_journal = "SELECT run_id, seq, job, tenant, calls, bytes, replayable, body, recorded_at \
        FROM jobhost_journals WHERE run_id = $1 ORDER BY seq DESC LIMIT 1";
    // The journals' seal key: the first host to need it writes it, every host reads it.
    secret = "SELECT value FROM jobhost_secrets WHERE name = $1";
    insert_secret = "INSERT INTO jobhost_secrets (name, value, created_at) VALUES ($1, $2, {now}) \
        ON CONFLICT (name) DO NOTHING";
    run_journals = "SELECT run_id, seq, job, tenant, calls, bytes, replayable, '' AS body, \
        recorded_at FROM jobhost_journals WHERE run_id = $1 ORDER BY seq";
    run_step_failures = "SELECT pass, name, attempts, last_code, last_error, failed_at \
        FROM jobhost_step_failures WHERE run_id = $1 ORDER BY pass, failed_at, name";
    record_step = "INSERT INTO jobhost_steps (run_id, pass, name, result, generation, recorded_at) \
        VALUES ($1, $2, $3, $4, $5, {now})";
    end_pass = "UPDATE jobhost_runs SET cursor = CASE WHEN $6 = 1 THEN cursor ELSE $4 END, \
        pass = CASE WHEN $6 = 1 THEN pass ELSE $3 + 1 END, work_done = $6, counters = $5, \
        updated_at = {now} WHERE id = $1 AND status = 'running' AND generation = $2 AND pass = $3";

    acquire_lease = "INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
        expires_at, pending, updated_at) VALUES ($1, $2, 1, $3, {now} + $4, {now} + $5, 0, {now}) \
        ON CONFLICT (job, instance) DO UPDATE SET generation = jobhost_leases.generation + 1, \
        holder = excluded.holder, deadline_at = {now} + $4, \
        expires_at = {now} + $5, pending = 0, updated_at = {now} \
        WHERE jobhost_leases.holder IS NULL \
            OR (jobhost_leases.expires_at <= {now} AND NOT {parked}) \
        RETURNING {lease_columns}";
    // A lease taken for one write outside any run (`host files put`), gone with it.
    drop_lease = "DELETE FROM jobhost_leases WHERE job = $1 AND instance = $2 AND holder = $3";
    // A fleet chore's turn is taken when no host took it within the taker's own hold, not
    // the holder's: the chore runs on the shortest interval in the fleet, and a host that
    // died holding a long turn delays no host with a shorter one.
    take_turn = "INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
        expires_at, pending, updated_at) VALUES ($1, 'fleet', 1, $2, {now} + $3, {now} + $3, 0, {now}) \
        ON CONFLICT (job, instance) DO UPDATE SET generation = jobhost_leases.generation + 1, \
        holder = excluded.holder, deadline_at = {now} + $3, expires_at = {now} + $3, \
        pending = 0, updated_at = {now} \
        WHERE jobhost_leases.updated_at <= {now} - $3 \
        RETURNING {lease_columns}";
    set_pending = "UPDATE jobhost_leases SET pending = 1, updated_at = {now} \
        WHERE job = $1 AND instance = $2 AND holder IS NOT NULL \
        AND (expires_at > {now} OR {parked})";
    get_lease = "SELECT {lease_columns} FROM jobhost_leases WHERE job = $1 AND instance = $2";
    // One lease per job, by its primary key: a job may have any number of instances.
    instance_leases = "SELECT {lease_columns} FROM jobhost_leases \
        WHERE instance = $1 AND job IN (SELECT name FROM jobhost_jobs) ORDER BY job";
    fence = "SELECT 1 FROM jobhost_leases WHERE {fence_match} {for_update}";

    // Whether an attempt still holds its lease, without locking it: checked right before
    // an effect that cannot commit with the lease (a `links` call).
    lease_live = "SELECT COUNT(*) FROM jobhost_leases WHERE {fence_match}";

    get_file = "SELECT {file_columns} FROM jobhost_files \
        WHERE tenant = $1 AND collection = $2 AND name = $3";
    get_file_by_key = "SELECT {file_columns} FROM jobhost_files \
        WHERE collection = $1 AND object_key = $2";
    list_files = "SELECT {file_columns} FROM jobhost_files \
        WHERE tenant = $1 AND collection = $2 AND status = 'clean' \
        AND substr(name, 1, length($3)) = $3 AND ($4 IS NULL OR name > $4) \
        ORDER BY name LIMIT $5";
    pending_files = "SELECT object_key, tenant, name, size FROM jobhost_files \
        WHERE collection = $1 AND status = 'pending' ORDER BY created_at LIMIT $2";
    insert_upload = "INSERT INTO jobhost_uploads (object_key, tenant, collection, run_id, \
        attach_by, created_at) VALUES ($1, $2, $3, $4, $5, {now})";
    // The statements of a `FileWrite` on SQLite, whose triggers (migration 0003) keep the
    // garbage and the uploads; on Postgres the functions of migration 0002 do the same.
    upsert_file = "INSERT INTO jobhost_files ({file_columns}) \
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, {now} WHERE {file_within_quota} {file_upsert}";
    delete_file = "DELETE FROM jobhost_files WHERE tenant = $1 AND collection = $2 AND name = $3";
    mark_file = "UPDATE jobhost_files SET status = $3 \
        WHERE collection = $1 AND object_key = $2 AND status = 'pending'";
    // The same on SQLite in a fenced write of the host's own, each one statement with the
    // lease check inside: a write statement takes SQLite's write lock as it starts, so the
    // check and the change are one atomic step, and one round trip instead of four.
    upsert_file_fenced = "INSERT INTO jobhost_files ({file_columns}) \
        SELECT $5, $6, $7, $8, $9, $10, $11, $12, {now} \
        WHERE {lease_held} AND {file_within_quota_fenced} {file_upsert}";
    delete_file_fenced = "DELETE FROM jobhost_files \
        WHERE tenant = $5 AND collection = $6 AND name = $7 AND {lease_held}";
    mark_file_fenced = "UPDATE jobhost_files SET status = $7 \
        WHERE collection = $5 AND object_key = $6 AND status = 'pending' AND {lease_held}";
    forget_upload = "DELETE FROM jobhost_uploads WHERE object_key = $1";
    // What the collector may delete: uploads no attempt can attach any more, and keys no
    // name has pointed at for `$1` ms.
    dead_uploads = "SELECT object_key, collection FROM jobhost_uploads \
        WHERE attach_by < {now} - $1 ORDER BY attach_by LIMIT $2";
    dead_garbage = "SELECT object_key, collection FROM jobhost_file_garbage \
        WHERE since < {now} - $1 ORDER BY since LIMIT $2";
    forget_garbage = "DELETE FROM jobhost_file_garbage WHERE object_key = $1";
    // A dead object the collector could not delete (a link in its way) goes to the back
    // of the line, so it does not hold up the others.
    postpone_upload = "UPDATE jobhost_uploads SET attach_by = {now} WHERE object_key = $1";
    postpone_garbage = "UPDATE jobhost_file_garbage SET since = {now} WHERE object_key = $1";

    signing_keys = "SELECT kid, seed, public_key, created_at FROM jobhost_signing_keys \
        ORDER BY created_at DESC";
    insert_signing_key = "INSERT INTO jobhost_signing_keys (kid, seed, public_key, created_at) \
        VALUES ($1, $2, $3, {now})";
    forget_signing_keys = "DELETE FROM jobhost_signing_keys WHERE created_at < {now} - $1";

    insert_report = "INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at, \
        next_try_at) VALUES ($1, $2, $3, $4, $5, {now}, {now})";
    // The same report (kind, job and body) only if the outbox holds none yet.
    insert_report_once = "INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at, \
        next_try_at) SELECT $1, $2, $3, $4, $5, {now}, {now} WHERE NOT EXISTS \
        (SELECT 1 FROM jobhost_reports WHERE kind = $1 AND job = $2 AND body = $5)";
    claim_reports = "UPDATE jobhost_reports SET next_try_at = {now} + $2 \
        WHERE id IN (SELECT id FROM jobhost_reports WHERE delivered_at IS NULL \
            AND next_try_at <= {now} ORDER BY id LIMIT $1 {skip_locked}) \
        RETURNING {report_columns}";
    report_logged = "UPDATE jobhost_reports SET logged_at = {now} WHERE id = $1 AND logged_at IS NULL";
    report_delivered = "UPDATE jobhost_reports SET delivered_at = {now}, \
        webhook_attempts = webhook_attempts + $2 WHERE id = $1";
    report_retry = "UPDATE jobhost_reports SET webhook_attempts = webhook_attempts + 1, \
        next_try_at = {now} + $2 WHERE id = $1";
    list_reports = "SELECT {report_columns} FROM jobhost_reports \
        WHERE ($1 IS NULL OR job = $1) \
        AND ($3 IS NULL OR run_id IN (SELECT id FROM jobhost_runs WHERE tenant = $3) \
            OR (run_id IS NULL AND job IN (SELECT name FROM jobhost_jobs WHERE tenant = $3))) \
        ORDER BY id DESC LIMIT $2";

    add_tenant = "INSERT INTO jobhost_tenants (name, active, created_at, updated_at) \
        VALUES ($1, 1, {now}, {now}) ON CONFLICT (name) DO NOTHING";
    list_tenants = "SELECT name, active, created_at, updated_at FROM jobhost_tenants ORDER BY name";
    get_tenant = "SELECT name, active, created_at, updated_at FROM jobhost_tenants WHERE name = $1";
    set_tenant_active = "UPDATE jobhost_tenants SET active = $2, updated_at = {now} WHERE name = $1";
    disabled_tenants = "SELECT name FROM jobhost_tenants WHERE active = 0";
    // A serving host registers the jobs it serves (`$1`), restoring any orphaned.
    serve_jobs = "UPDATE jobhost_jobs SET served_at = {now}, orphaned_at = NULL \
        WHERE name IN {json_ids}";
    // Jobs that no host registered, served or upserted, for the last `$1` ms.
    mark_orphans = "UPDATE jobhost_jobs SET orphaned_at = {now} \
        WHERE orphaned_at IS NULL AND updated_at < {now} - $1 \
        AND (served_at IS NULL OR served_at < {now} - $1)";
    // Runs waiting in orphaned jobs' queues (by `jobhost_runs_live`), but a `host run`'s
    // (its process holds it), in lease key order; and the end of one (`$2` status, `$3`
    // code) while it still waits and its job is still orphaned.
    orphaned_waiting_runs = "SELECT {run_columns} FROM jobhost_runs WHERE status = 'queued' \
        AND origin <> 'manual' AND job IN (SELECT name FROM jobhost_jobs \
            WHERE orphaned_at IS NOT NULL) \
        ORDER BY job, instance, id LIMIT $1";
    end_orphaned_run = "UPDATE jobhost_runs SET status = $2, last_code = $3, \
        finished_at = {now}, updated_at = {now} \
        WHERE id = $1 AND status = 'queued' AND origin <> 'manual' \
        AND job IN (SELECT name FROM jobhost_jobs WHERE orphaned_at IS NOT NULL) \
        RETURNING {run_columns}";
    // The first registration of a version of a run_on_boot job takes its boot.
    take_boot = "UPDATE jobhost_jobs SET boot_digest = $2 \
        WHERE name = $1 AND boot_digest IS DISTINCT FROM $2";
    active_tenants = "SELECT name FROM jobhost_tenants WHERE active = 1 ORDER BY name";
    insert_token = "INSERT INTO jobhost_tokens (id, secret_hash, tenant, label, created_at, \
        read_only, expires_at) VALUES ($1, $2, $3, $4, {now}, $5, {now} + $6)";
    list_tokens = "SELECT id, tenant, label, created_at, revoked_at, read_only, expires_at, \
        CAST(CASE WHEN expires_at <= {now} THEN 1 ELSE 0 END AS BIGINT) AS expired FROM jobhost_tokens \
        ORDER BY created_at, id";
    revoke_token = "UPDATE jobhost_tokens SET revoked_at = {now} WHERE id = $1 AND revoked_at IS NULL";
    // A token of a tenant that is not registered any more counts as disabled; one past
    // its expiry is found, so it can be refused in words of its own.
    check_token = "SELECT k.secret_hash, k.tenant, k.label, k.read_only, \
        CASE WHEN k.tenant IS NULL THEN 1 ELSE COALESCE(t.active, 0) END AS tenant_active, \
        CAST(CASE WHEN k.expires_at <= {now} THEN 1 ELSE 0 END AS BIGINT) AS expired \
        FROM jobhost_tokens k LEFT JOIN jobhost_tenants t ON t.name = k.tenant \
        WHERE k.id = $1 AND k.revoked_at IS NULL";
    live_tokens = "SELECT COUNT(*) FROM jobhost_tokens WHERE revoked_at IS NULL";
    insert_audit = "INSERT INTO jobhost_audit (at, actor, token_id, label, tenant, action, \
        object, run_id, result) VALUES ({now}, $1, $2, $3, $4, $5, $6, $7, $8)";
    // Newest first: since `$1`, of action `$2`, tenant `$3` and run `$4` (any, if null).
    list_audit = "SELECT id, at, actor, token_id, label, tenant, action, object, run_id, result \
        FROM jobhost_audit WHERE ($1 IS NULL OR at >= $1) AND ($2 IS NULL OR action = $2) \
        AND ($3 IS NULL OR tenant = $3) AND ($4 IS NULL OR run_id = $4) \
        ORDER BY at DESC, id DESC LIMIT $5";
    prune_audit = "DELETE FROM jobhost_audit WHERE id IN (SELECT id FROM jobhost_audit \
        WHERE at < {now} - $1 ORDER BY at, id LIMIT $2)";
    // Hosts' heartbeats (`store::hosts`, migration 0038). `$4` is 1 on a host's first
    // beat: a process that reuses an id (a container's pid 1) starts afresh.
    beat_host = "INSERT INTO jobhost_hosts (host_id, version, lanes, started_at, seen_at, stopped_at) \
        VALUES ($1, $2, $3, {now}, {now}, NULL) \
        ON CONFLICT (host_id) DO UPDATE SET version = excluded.version, lanes = excluded.lanes, \
        seen_at = excluded.seen_at, stopped_at = NULL, \
        started_at = CASE WHEN $4 = 1 THEN excluded.started_at ELSE jobhost_hosts.started_at END";
    host_stopped = "UPDATE jobhost_hosts SET stopped_at = {now}, seen_at = {now} WHERE host_id = $1";
    prune_hosts = "DELETE FROM jobhost_hosts WHERE seen_at < {now} - $1";
    list_hosts = "SELECT host_id, version, lanes, started_at, seen_at, stopped_at \
        FROM jobhost_hosts ORDER BY host_id LIMIT $1";
    // Queued runs due after now (a start's `run_at` or `delay`, a retry's backoff, a
    // signal's timeout), soonest first, of tenant `$1` (any, if null), `$2` of them: a
    // range of the queued runs' index by due time.
    future_runs = "SELECT {run_columns} FROM jobhost_runs WHERE status = 'queued' \
        AND next_attempt_at > {now} AND ($1 IS NULL OR tenant = $1) \
        ORDER BY next_attempt_at, id LIMIT $2";
    // Payload search (`store::payload_search`): on Postgres, containment served by the GIN
    // index of migration 0038, whose predicate (the payload is an object — chr(123) is the
    // brace these statements cannot spell — without the escape jsonb refuses) this repeats
    // so the planner may use it.
    search_payloads = "SELECT {run_columns} FROM jobhost_runs \
        WHERE substr(payload, 1, 1) = chr(123) AND strpos(payload, '\\u0000') = 0 \
        AND CAST(payload AS jsonb) @> CAST($1 AS jsonb) \
        AND ($2 IS NULL OR job = $2) AND ($3 IS NULL OR tenant = $3) \
        ORDER BY created_at DESC, id DESC LIMIT $4";
    // On SQLite: a page of payloads, newest first, after the run created at `$3` with id `$4`.
    scan_payloads = "SELECT id, payload, created_at FROM jobhost_runs \
        WHERE ($1 IS NULL OR job = $1) AND ($2 IS NULL OR tenant = $2) \
        AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC LIMIT $5";
    // Signals (`store::signals`, migration 0033). A send locks its run's row (`$2`: the
    // sending tenant, NULL for the operator), so it is ordered with the waiting pass's
    // ending; it wakes the run only if the pass that waits for `$2` has ended.
    signal_target = "SELECT status FROM jobhost_runs WHERE id = $1 \
        AND ($2 IS NULL OR tenant = $2) {for_update}";
    stored_signal = "SELECT name, payload FROM jobhost_signals WHERE run_id = $1 AND signal_id = $2";
    unread_signals = "SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_signals \
        WHERE run_id = $1 AND pass IS NULL LIMIT $2) u";
    insert_signal = "INSERT INTO jobhost_signals (run_id, signal_id, name, payload, received_at, pass) \
        VALUES ($1, $2, $3, $4, {now}, NULL)";
    // Setting the status (to what it is) fires Postgres' notification of a queued run.
    wake_for_signal = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = {now}, \
        signal_name = NULL, updated_at = {now} \
        WHERE id = $1 AND status = 'queued' AND signal_name = $2 AND signal_pass = pass - 1";
    // Fenced by `$1`..`$4`: the running run `$5` of that generation waits for `$6`.
    wait_for_signal = "UPDATE jobhost_runs SET signal_name = $6, signal_pass = pass, \
        updated_at = {now} \
        WHERE id = $5 AND status = 'running' AND generation = $3 AND {lease_held}";
    taken_signal = "SELECT signal_id, payload FROM jobhost_signals \
        WHERE run_id = $1 AND name = $2 AND pass = $3 ORDER BY received_at, signal_id LIMIT 1";
    // Fenced by `$1`..`$4`, and run `$5` still running pass `$6`: the first unread signal
    // named `$7` is taken for that pass.
    take_signal = "UPDATE jobhost_signals SET pass = $6 WHERE run_id = $5 AND pass IS NULL \
        AND signal_id = (SELECT s.signal_id FROM jobhost_signals s WHERE s.run_id = $5 \
            AND s.name = $7 AND s.pass IS NULL ORDER BY s.received_at, s.signal_id LIMIT 1) \
        AND EXISTS (SELECT 1 FROM jobhost_runs r WHERE r.id = $5 AND r.status = 'running' \
            AND r.generation = $3 AND r.pass = $6) \
        AND {lease_held} RETURNING signal_id, payload";
    holds_pass = "SELECT CAST(1 AS BIGINT) FROM jobhost_runs WHERE id = $5 AND status = 'running' \
        AND generation = $3 AND pass = $6 AND {lease_held}";
    // Runs asleep waiting for a signal that is stored already, found from the unread
    // signals (a partial index), not from the runs: read first (`$1` at most), so a sweep
    // with none to wake writes nothing (on SQLite, never waits for the write lock); then
    // woken, each only while it still sleeps so.
    signalled_runs = "SELECT id FROM jobhost_runs \
        WHERE id IN (SELECT s.run_id FROM jobhost_signals s WHERE s.pass IS NULL) \
        AND {signal_sleeper} LIMIT $1";
    wake_signalled = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = {now}, \
        signal_name = NULL, updated_at = {now} WHERE id IN {json_ids} AND {signal_sleeper}";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_is_rendered() {
        for dialect in [&SQLITE, &POSTGRES] {
            let q = Queries::render(dialect);
            for sql in q.all() {
                assert!(!sql.contains('{'), "unrendered token in {sql}");
            }
        }
    }
}
