-- The operator's controls (issue 28): cancel, retry now, pause.
--
-- A retry is a new run linked both ways to the run it retries: `retry_of` on the new run,
-- `retried_by` on the original, set in the one transaction that queues the retry and only
-- while it is unset, so retrying a run twice (a bulk retry sent again) queues one retry.
ALTER TABLE jobhost_runs ADD COLUMN retry_of TEXT;
ALTER TABLE jobhost_runs ADD COLUMN retried_by TEXT;

-- What is paused: a job, a tenant or a lane, by name. A host reads the set before it
-- claims (`pause::Pauses`) and claims nothing of what it names; running attempts finish.
CREATE TABLE jobhost_pauses (
    scope     TEXT NOT NULL,
    name      TEXT NOT NULL,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (scope, name)
);

-- The objects a run attached, for its page (a run's files are looked up by its id).
CREATE INDEX jobhost_files_run ON jobhost_files (run_id);

-- The runs list pages by `(created_at, id)`, newest first, in all, by job and by tenant:
-- each index ends with the id, so a page after a cursor is one range read in order,
-- however deep (at a million runs a deep page read every run before it, then sorted ties).
DROP INDEX jobhost_runs_created;
CREATE INDEX jobhost_runs_created ON jobhost_runs (created_at, id);
DROP INDEX jobhost_runs_job;
CREATE INDEX jobhost_runs_job ON jobhost_runs (job, created_at, id);
DROP INDEX jobhost_runs_tenant;
CREATE INDEX jobhost_runs_tenant ON jobhost_runs (tenant, created_at, id);
