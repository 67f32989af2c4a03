-- A crashed run hands its ledger on instead of keeping a copy. Marking a run crashed used to
-- copy the steps of its pass into the rerun and leave the crashed run's own behind: after a
-- few dozen kills of a stepped run, most step rows belonged to crashed runs, kept until
-- retention. The transaction that marks a run crashed and queues its rerun now moves the
-- steps to the rerun (`store::queries`, `move_ledger`) and records on the crashed run which
-- rerun took them (`resumed_by`): a run's ledger is kept once, by the newest run of its
-- chain, and each crashed run names the next one. The SQLite migration of this number has the
-- same column and index.
ALTER TABLE jobhost_runs ADD COLUMN resumed_by TEXT;

-- A crashed run's reruns, by their first run: how many it had (`count_reruns`, read each time
-- surveillance finds a crashed run, which read the whole table) and, below, which came next.
-- Only reruns have an entry.
CREATE INDEX jobhost_runs_reruns ON jobhost_runs (rerun_of, created_at)
    WHERE rerun_of IS NOT NULL;

-- Runs crashed before this migration: the next rerun of the chain, if any, holds a copy of
-- their ledger. Only runs that still have steps are looked at.
UPDATE jobhost_runs SET resumed_by = (SELECT r.id FROM jobhost_runs r
        WHERE r.rerun_of = COALESCE(jobhost_runs.rerun_of, jobhost_runs.id)
          AND r.id <> jobhost_runs.id
          AND (r.created_at > jobhost_runs.created_at
               OR (r.created_at = jobhost_runs.created_at AND r.id > jobhost_runs.id))
        ORDER BY r.created_at, r.id LIMIT 1)
WHERE status = 'crashed' AND id IN (SELECT run_id FROM jobhost_steps);
DELETE FROM jobhost_steps WHERE run_id IN (SELECT id FROM jobhost_runs
    WHERE status = 'crashed' AND resumed_by IS NOT NULL);
