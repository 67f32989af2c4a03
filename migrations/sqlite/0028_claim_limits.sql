-- Claim limits: rate, concurrency and limits per key (issue 40; docs/internals/flow-control.md).
-- The Postgres migration of the same number has the same columns and table.

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
-- the window and drops the rows older than it.
CREATE TABLE jobhost_rate_starts (
    job   TEXT NOT NULL,
    scope BIGINT NOT NULL,
    key   TEXT NOT NULL,
    at    BIGINT NOT NULL
);
CREATE INDEX jobhost_rate_starts_window ON jobhost_rate_starts (job, scope, key, at);
CREATE INDEX jobhost_rate_starts_age ON jobhost_rate_starts (job, at);

-- The key of a run of a job with `key`: its instance, its tenant, or the payload's member
-- the pointer names (members only, `~1` and `~0` unescaped; '' where there is none).
CREATE TRIGGER jobhost_runs_limit_key AFTER INSERT ON jobhost_runs
WHEN EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = NEW.job AND j.key_by IS NOT NULL)
BEGIN
    UPDATE jobhost_runs SET limit_key = (
        SELECT CASE j.key_by WHEN 'instance' THEN NEW.instance WHEN 'tenant' THEN NEW.tenant
            ELSE COALESCE(CAST(json_extract(NEW.payload, '$."' || replace(replace(replace(
                substr(j.key_by, 2), '/', '"."'), '~1', '/'), '~0', '~') || '"') AS TEXT), '')
            END
        FROM jobhost_jobs j WHERE j.name = NEW.job)
    WHERE rowid = NEW.rowid;
END;
