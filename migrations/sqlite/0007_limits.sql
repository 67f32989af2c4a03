-- Flow control (see docs/architecture.md, "Flow control"): sequential jobs and a bound on
-- a run's defers. The Postgres migration of the same number has the same tables and
-- columns.

-- 1 for a job whose runs run one at a time across the fleet (`sequential = true`), set by
-- its registration: the claim, which must see it on every host alike, reads it here.
ALTER TABLE jobhost_jobs ADD COLUMN sequential BIGINT NOT NULL DEFAULT 0;

-- How many passes of the run ended `defer`, kept with the run (and a rerun after a
-- crash) so a host that dies does not reset it; bounded by the job's `max_defers`.
ALTER TABLE jobhost_runs ADD COLUMN defers BIGINT NOT NULL DEFAULT 0;

-- The running runs of a job: what a claim of a sequential job's run looks for.
CREATE INDEX jobhost_runs_running ON jobhost_runs (job) WHERE status = 'running';
