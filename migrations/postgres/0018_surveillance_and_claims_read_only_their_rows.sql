-- Surveillance reads only the runs a host holds; the claim and ending functions plan each
-- statement for the batch in hand; and a claim does not look for memoised steps of runs
-- that cannot have any to drop.
--
-- - Surveillance looks for lost runs among the running runs and the queued manual ones
--   (a retry or the next pass of a `host run`). Asked as one condition with an `OR`,
--   the planner read every queued run (the index by status serves `queued` but not
--   `origin = 'manual'`), or the whole table once the statistics said most runs are
--   queued: each tick cost time in proportion to the backlog, or to the history. The
--   query is now one branch per kind (`store::queries`, `lost_runs`): running runs by
--   the index by status, queued manual runs by this index, which holds no other run, so
--   queueing or starting a run of any other origin writes no entry to it.
-- - The claim and ending functions join the batch's arrays to the leases and runs.
--   PL/pgSQL keeps each statement's plan in the session: after five calls, and again
--   whenever the plan is made anew (an `ANALYZE` of the table, by autovacuum say), it may
--   keep a generic plan, made for an array of ten items and the tables as they are at
--   that moment. Made while the lease table was small, the generic plan of a claim's
--   lease lock read every lease in key order and compared each with every item of the
--   batch: with 20 000 leases, each claim took 350 ms instead of 1 ms, until the next
--   re-plan (found by `JOBHOST_BENCH_PARTS=floor cargo bench -p jobhost --bench serve`,
--   which drains four times in one session). Both functions now plan every statement
--   with the call's arrays (`plan_cache_mode = force_custom_plan`), at the price of
--   planning every call (about 6 % of the server's CPU in a drain). A later
--   `CREATE OR REPLACE` of either must keep the setting.
-- - The statement trigger of migration 0016 deletes the steps a run no longer needs. A
--   run at its first pass, neither done nor succeeded, has none to drop (steps are
--   recorded at the run's pass, and passes start at 1), so its row is no longer looked
--   up among the steps: a claim starts runs without probing the steps' index for each.

CREATE INDEX jobhost_runs_manual_queued ON jobhost_runs (updated_at)
    WHERE status = 'queued' AND origin = 'manual';

CREATE OR REPLACE FUNCTION jobhost_runs_changed() RETURNS TRIGGER
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_jobs TEXT[];
BEGIN
    DELETE FROM jobhost_steps s USING changed_new n
    WHERE (n.pass > 1 OR n.status = 'succeeded' OR n.work_done = 1)
      AND s.run_id = n.id
      AND (s.pass < n.pass OR n.status = 'succeeded' OR n.work_done = 1);
    -- The sequential jobs among those of the rows not running now.
    v_jobs := ARRAY(SELECT j.name FROM jobhost_jobs j
        WHERE j.sequential = 1
          AND j.name = ANY (ARRAY(SELECT DISTINCT n.job FROM changed_new n
                                  WHERE n.status <> 'running')));
    IF cardinality(v_jobs) > 0
       AND EXISTS (SELECT 1 FROM changed_new n JOIN changed_old o ON o.id = n.id
                   WHERE n.job = ANY (v_jobs) AND o.status = 'running'
                     AND n.status <> 'running')
    THEN
        PERFORM pg_notify('jobhost_work', '');
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_runs_changed() FROM PUBLIC;

ALTER FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT, TEXT[], TEXT[])
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION jobhost_record_attempts(jobhost_attempt_item[])
    SET plan_cache_mode = force_custom_plan;
