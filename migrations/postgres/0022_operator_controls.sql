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
