//! The statements of claims and endings that no other code runs, written once for both
//! backends with the `Dialect` machinery of `store::queries` (whose tokens they use).
//!
//! The steps of a batched claim and of recording attempts' ends, as the SQLite writer
//! runs them in one transaction (`sqlite`); on Postgres the functions of
//! `migrations/postgres/functions` run the same steps (`claim_runs.sql`,
//! `record_attempts.sql`), and read only `queued_tenants` from here.

use crate::store::queries::{self, statements};
use std::sync::LazyLock;

pub(crate) static SQLITE: LazyLock<ClaimStatements> =
    LazyLock::new(|| ClaimStatements::render(&queries::SQLITE));
pub(crate) static POSTGRES: LazyLock<ClaimStatements> =
    LazyLock::new(|| ClaimStatements::render(&queries::POSTGRES));

statements! {
    ClaimStatements;

    // A claim takes the tenants with queued runs (`queued_tenants`: one probe of the index
    // per tenant) and up to `$1` due runs of each (`due_runs`, tenant `$3`), in turns: fair
    // across tenants. The SQLite writer walks them in every claim; a Postgres host at most
    // once a second, for its claims (migration 0010), adding those that notifications name
    // meanwhile (`claims::QueuedTenants`).
    queued_tenants = "WITH RECURSIVE t(tenant) AS ( \
            SELECT (SELECT tenant FROM jobhost_runs {by_tenant_index} WHERE status = 'queued' \
                ORDER BY tenant LIMIT 1) \
            UNION ALL \
            SELECT (SELECT r.tenant FROM jobhost_runs r {by_tenant_index} \
                WHERE r.status = 'queued' AND r.tenant > t.tenant ORDER BY r.tenant LIMIT 1) \
            FROM t WHERE t.tenant IS NOT NULL) \
        SELECT tenant FROM t WHERE tenant IS NOT NULL";
    due_runs = "SELECT id, job, instance, generation, tenant, waiting, next_attempt_at, limit_key \
        FROM jobhost_runs {by_tenant_index} \
        WHERE status = 'queued' AND tenant = $3 AND origin <> 'manual' \
        AND next_attempt_at <= {now} AND job IN (SELECT value FROM json_each($2)) \
        AND {limits_free} {unmarked:id} \
        ORDER BY next_attempt_at, {queue_order} LIMIT $1";
    // A run waiting for a slot (job `$1`, tenant `$2`, run `$3`) starts only while fewer
    // than the job's `max_per_tenant` runs hold one; otherwise it waits again, longer
    // each time (0.5 s doubling to 60 s, up to half of it taken off at random), without
    // using an attempt.
    slot_taken = "SELECT COUNT(*) FROM jobhost_jobs j WHERE j.name = $1 \
        AND j.max_per_tenant IS NOT NULL AND j.max_per_tenant <= (SELECT COUNT(*) \
            FROM jobhost_runs o WHERE o.job = $1 AND o.tenant = $2 AND o.id <> $3 \
            AND (o.status = 'running' OR (o.status = 'queued' AND o.waiting = 0)))";
    wait_for_slot = "UPDATE jobhost_runs SET slot_waits = slot_waits + 1, \
        next_attempt_at = {now} + CAST((CASE WHEN slot_waits >= 7 THEN 60000 \
            ELSE 500 * (1 << slot_waits) END) * (1 - {random_unit} / 2) AS BIGINT), \
        updated_at = {now} WHERE id = $1";
    // A claim starts run `$1` only while no limit of its job or key holds it back (the
    // single writer orders every claim, so the count sees each run started before it).
    held_back = "SELECT {held_back:r} FROM jobhost_runs r WHERE r.id = $1";
    // Whether job `$1` has a claim limit, and a rate among them: read once per job a claim.
    job_limits = "SELECT CASE WHEN sequential = 1 OR concurrency IS NOT NULL \
            OR rate_starts IS NOT NULL OR key_by IS NOT NULL THEN 1 ELSE 0 END, \
        CASE WHEN rate_starts IS NOT NULL OR key_rate_starts IS NOT NULL THEN 1 ELSE 0 END \
        FROM jobhost_jobs WHERE name = $1";
    // A start of job `$1` (key `$2`) in the windows of its job's rates; then the rows of
    // the job's windows older than their window (the first test bounds the index range).
    record_start = "INSERT INTO jobhost_rate_starts (job, scope, key, at) \
        SELECT j.name, 0, '', {now} FROM jobhost_jobs j \
        WHERE j.name = $1 AND j.rate_starts IS NOT NULL \
        UNION ALL \
        SELECT j.name, 1, $2, {now} FROM jobhost_jobs j \
        WHERE j.name = $1 AND j.key_rate_starts IS NOT NULL AND $2 IS NOT NULL";
    prune_starts = "DELETE FROM jobhost_rate_starts WHERE job = $1 \
        AND at <= {now} - (SELECT CASE WHEN j.rate_period_ms IS NULL \
            OR j.key_rate_period_ms < j.rate_period_ms THEN j.key_rate_period_ms \
            ELSE j.rate_period_ms END FROM jobhost_jobs j WHERE j.name = $1) \
        AND at <= {now} - (SELECT CASE WHEN jobhost_rate_starts.scope = 0 THEN j.rate_period_ms \
            ELSE j.key_rate_period_ms END FROM jobhost_jobs j WHERE j.name = $1)";
    claimable_run = "SELECT id, job, instance, generation, tenant, waiting, next_attempt_at, limit_key \
        FROM jobhost_runs WHERE id = $1 {unmarked:id} \
        AND (status = 'queued' OR (status = 'running' AND host = $2 AND generation IS NULL))";
    start_run = "UPDATE jobhost_runs SET status = 'running', host = $2, waiting = 0, \
        generation = COALESCE($3, generation), \
        attempts = attempts + CASE WHEN $3 IS NULL THEN 0 ELSE 1 END, \
        component_digest = CASE WHEN $3 IS NULL THEN component_digest ELSE $4 END, \
        guest_started_at = NULL, updated_at = {now} \
        WHERE id = $1 RETURNING {run_columns}";
    renew_lease = "UPDATE jobhost_leases SET generation = generation + 1, \
        deadline_at = {now} + $5, expires_at = {now} + $6, updated_at = {now} \
        WHERE job = $1 AND instance = $2 AND generation = $3 AND holder = $4 \
        RETURNING {lease_columns}";

    // The ending: the lease's pending flag read first (and locked), the attempt's row,
    // then the run's change.
    lease_pending = "SELECT pending FROM jobhost_leases \
        WHERE job = $1 AND instance = $2 AND generation = $3 AND holder = $4 {for_update}";
    record_attempt = "INSERT INTO jobhost_attempts (run_id, seq, pass, attempt, generation, host, \
        status, outcome, code, fuel_used, peak_memory, duration_ms, log, log_truncated, \
        started_at, finished_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, {now}) \
        ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status, \
        outcome = excluded.outcome, code = excluded.code, fuel_used = excluded.fuel_used, \
        peak_memory = excluded.peak_memory, duration_ms = excluded.duration_ms, \
        log = excluded.log, log_truncated = excluded.log_truncated, \
        finished_at = excluded.finished_at";
    // An ending leaves a run with a cancel recorded to the cancel (its attempt's row is
    // still written).
    run_running = "SELECT COUNT(*) FROM jobhost_runs \
        WHERE id = $1 AND status = 'running' AND generation = $2 {unmarked:$1}";
    give_back_run = "UPDATE jobhost_runs SET status = 'queued', attempts = attempts - 1, \
        updated_at = {now} WHERE id = $1 AND status = 'running' AND generation = $2";
    requeue_run = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = {now} + $3, \
        pass = $4, cursor = $5, failures = $6, last_code = $7, last_error = $8, \
        counters = COALESCE($9, counters), defers = $10, \
        started_at = COALESCE(started_at, $11), updated_at = {now} \
        WHERE id = $1 AND status = 'running' AND generation = $2";
    finish_run = "UPDATE jobhost_runs SET status = $3, last_code = $4, last_error = $5, \
        cursor = $6, pass = $7, failures = $8, counters = COALESCE($9, counters), \
        started_at = COALESCE(started_at, $10), finished_at = {now}, updated_at = {now} \
        WHERE id = $1 AND status = 'running' AND generation = $2";
    release_lease = "UPDATE jobhost_leases SET holder = NULL, pending = 0, deadline_at = {now}, \
        expires_at = {now}, updated_at = {now} \
        WHERE job = $1 AND instance = $2 AND generation = $3";
    park_lease = "UPDATE jobhost_leases SET deadline_at = {now}, expires_at = {now} + $5, \
        updated_at = {now} WHERE job = $1 AND instance = $2 AND generation = $3 AND holder = $4";
    // Kept to the second: a job that succeeds many times a second must not turn its row
    // into a lock every host's finishing transaction waits for.
    record_success = "UPDATE jobhost_jobs SET last_success_at = {now}, missed_reported_at = NULL \
        WHERE name = $1 AND (last_success_at IS NULL OR last_success_at < {now} - 1000 \
            OR missed_reported_at IS NOT NULL)";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_is_rendered() {
        for statements in [&*SQLITE, &*POSTGRES] {
            for sql in statements.all() {
                assert!(!sql.contains('{'), "unrendered token in {sql}");
            }
        }
    }
}
