-- Resumable runs (see docs/architecture.md, "Resumable runs"): the step ledger of a run's
-- current pass, and the mark of a pass that committed `done` with its writes. The
-- Postgres migration of the same number has the same tables and columns.

-- A step's recorded result, per run and pass. The ledger belongs to the pass: the trigger
-- below drops it in the statement that commits the pass's end (the run moves to a later
-- pass, succeeds, or commits `done`), and it stays when an attempt fails.
CREATE TABLE jobhost_steps (
    run_id      TEXT NOT NULL,
    pass        BIGINT NOT NULL,
    name        TEXT NOT NULL,
    result      TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, pass, name)
);

-- 1 once a pass committed `done` together with its writes (`steps.commit-pass`): what is
-- left is only to record the run's end, which an attempt after a crash does without
-- running the guest again.
ALTER TABLE jobhost_runs ADD COLUMN work_done BIGINT NOT NULL DEFAULT 0;

-- The live runs of a job and instance, for start-or-join (`Store::start_or_join`): not
-- unique, so a crashed run never blocks a new start; the lease row serialises starts.
CREATE INDEX jobhost_runs_live ON jobhost_runs (job, instance)
WHERE status IN ('queued', 'running');

CREATE TRIGGER jobhost_steps_dropped AFTER UPDATE OF pass, status, work_done ON jobhost_runs
WHEN NEW.pass <> OLD.pass OR NEW.work_done <> OLD.work_done
    OR (NEW.status = 'succeeded' AND OLD.status <> 'succeeded')
BEGIN
    DELETE FROM jobhost_steps WHERE run_id = NEW.id
        AND (pass < NEW.pass OR NEW.status = 'succeeded' OR NEW.work_done = 1);
END;
