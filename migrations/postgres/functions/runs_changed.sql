-- One statement-level trigger on run updates: notifies hosts when a slot of a job with a
-- claim limit (`sequential`, `concurrency`, per key) frees, drops a run's steps when its
-- pass, work or status moves on, and writes the deliveries of the runs that ended
-- (migration 0034), in the transaction that ends them. The old rows are read for the
-- ended runs of routed jobs only, and not at all while no job routes an ending.
CREATE OR REPLACE FUNCTION jobhost_runs_changed()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_jobs TEXT[];
BEGIN
    DELETE FROM jobhost_steps s USING changed_new n
    WHERE (n.pass > 1 OR n.status = 'succeeded' OR n.work_done = 1)
      AND s.run_id = n.id
      AND (s.pass < n.pass OR n.status = 'succeeded' OR n.work_done = 1);
    -- The jobs with a claim limit among those of the rows not running now.
    v_jobs := ARRAY(SELECT j.name FROM jobhost_jobs j
        WHERE (j.sequential = 1 OR j.concurrency IS NOT NULL OR j.key_by IS NOT NULL)
          AND j.name = ANY (ARRAY(SELECT DISTINCT n.job FROM changed_new n
                                  WHERE n.status <> 'running')));
    IF EXISTS (SELECT 1 FROM jobhost_delivery_routes) THEN
        INSERT INTO jobhost_deliveries (run_id, job, tenant, webhook, ending, after_run,
            next_try_at, retry_from, created_at, updated_at)
        SELECT e.id, e.job, e.tenant, e.webhook, e.status, e.after_run, t.now, t.now, t.now,
            t.now
        FROM (SELECT n.id, n.job, n.tenant, r.webhook, n.status,
                  COALESCE(n.retry_of, n.rerun_of) AS after_run
              FROM changed_new n
              JOIN jobhost_delivery_routes r ON r.job = n.job AND r.ending = n.status
              WHERE n.status NOT IN ('queued', 'running')) e
        CROSS JOIN (SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
                    AS now) t
        WHERE EXISTS (SELECT 1 FROM changed_old o
                      WHERE o.id = e.id AND o.status IN ('queued', 'running'))
        ORDER BY e.id
        ON CONFLICT (run_id, webhook) DO NOTHING;
    END IF;
    IF cardinality(v_jobs) > 0
       AND EXISTS (SELECT 1 FROM changed_new n JOIN changed_old o ON o.id = n.id
                   WHERE n.job = ANY (v_jobs) AND o.status = 'running'
                     AND n.status <> 'running')
    THEN
        PERFORM pg_notify('jobhost_work', '');
    END IF;
    RETURN NULL;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_runs_changed() FROM PUBLIC;
