-- One statement-level trigger on run updates: notifies hosts when a slot of a job with a
-- claim limit (`sequential`, `concurrency`, per key) frees, and drops a run's steps when
-- its pass, work or status moves on.
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
