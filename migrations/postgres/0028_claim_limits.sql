-- Claim limits: rate, concurrency and limits per key (issue 40; docs/internals/flow-control.md).
-- The SQLite migration of the same number has the same columns and table. The claim's
-- check is `jobhost_held_back` (functions/held_back.sql); the key's computation is
-- `jobhost_run_limit_key` (functions/run_limit_key.sql, whose first body is below so the
-- trigger can name it).

-- A job's limits, written by its registration so every host's claim applies the same:
-- starts per period (`rate_starts` per `rate_period_ms`), runs running at once, what the
-- per-key limits count by (`key_by`: `instance`, `tenant` or a JSON pointer into the
-- payload), their rate and concurrency, and `order = "fifo"`.
ALTER TABLE jobhost_jobs ADD COLUMN concurrency BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN rate_starts BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN rate_period_ms BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN key_by TEXT;
ALTER TABLE jobhost_jobs ADD COLUMN key_concurrency BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN key_rate_starts BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN key_rate_period_ms BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN fifo BIGINT NOT NULL DEFAULT 0;

-- A run's key, computed once as it is queued (the trigger below), so no claim reads a
-- payload. NULL for the runs of a job without `key` (and of one queued before its job
-- declared it: the per-key limits pass them).
ALTER TABLE jobhost_runs ADD COLUMN limit_key TEXT;
CREATE INDEX jobhost_runs_by_key ON jobhost_runs (job, limit_key, status, created_at, id)
    WHERE limit_key IS NOT NULL;

-- The sliding windows of the rates: one row per start of a rate-limited job (`scope` 0,
-- `key` '') and per start of a key with `key_rate` (`scope` 1). A claim counts the rows of
-- the window under the job's (or key's) lock and drops rows older than it.
CREATE TABLE jobhost_rate_starts (
    job   TEXT NOT NULL,
    scope BIGINT NOT NULL,
    key   TEXT NOT NULL,
    at    BIGINT NOT NULL
);
CREATE INDEX jobhost_rate_starts_window ON jobhost_rate_starts (job, scope, key, at);
CREATE INDEX jobhost_rate_starts_age ON jobhost_rate_starts (job, at);

CREATE FUNCTION jobhost_run_limit_key() RETURNS TRIGGER
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    RETURN NEW;
END
$function$;

CREATE TRIGGER jobhost_runs_limit_key BEFORE INSERT ON jobhost_runs
    FOR EACH ROW EXECUTE FUNCTION jobhost_run_limit_key();
