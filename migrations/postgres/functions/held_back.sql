-- Why a queued run of job `p_job` (id `p_run`, key `p_key`, queued at `p_created`) may not
-- start now, or NULL: `concurrency` (its job's `concurrency` or `sequential` reached),
-- `rate` (its job's window of starts full), `key` (its key's `key_concurrency`, its
-- `key_rate`, or `order = "fifo"`: a run of the key running, or an older one queued). With
-- `p_key` NULL only the job's own limits are read. Counted from the runs' status and the
-- windows' rows, never from counters, so a cancel, crash or lease loss frees a slot. The
-- claim applies this rule to a whole batch at once, counting per job and key under their
-- locks (`claim_runs.sql`: a change here is a change there), and calls it for a run that
-- starts on its own and to pass over held runs; reads (`host runs show`, the next due run)
-- call it without locks. The SQLite twin is `HELD_BACK` in `host/src/store/queries.rs`.
CREATE OR REPLACE FUNCTION jobhost_held_back(p_job text, p_run text, p_key text, p_created bigint)
 RETURNS text
 LANGUAGE sql
 VOLATILE
 SET search_path FROM CURRENT
AS $function$
    SELECT CASE
        WHEN (j.sequential = 1 OR j.concurrency IS NOT NULL)
             AND (SELECT COUNT(*) FROM jobhost_runs o
                  WHERE o.job = p_job AND o.status = 'running' AND o.id IS DISTINCT FROM p_run)
                 >= COALESCE(j.concurrency, 1)
        THEN 'concurrency'
        WHEN j.rate_starts IS NOT NULL
             AND (SELECT COUNT(*) FROM jobhost_rate_starts s
                  WHERE s.job = p_job AND s.scope = 0 AND s.key = ''
                    AND s.at > CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
                        - j.rate_period_ms)
                 >= j.rate_starts
        THEN 'rate'
        WHEN p_key IS NOT NULL AND j.key_by IS NOT NULL AND (
            ((j.fifo = 1 OR j.key_concurrency IS NOT NULL)
             AND (SELECT COUNT(*) FROM jobhost_runs o
                  WHERE o.job = p_job AND o.limit_key = p_key AND o.status = 'running'
                    AND o.id IS DISTINCT FROM p_run)
                 >= CASE WHEN j.fifo = 1 THEN 1 ELSE j.key_concurrency END)
            OR (j.fifo = 1 AND EXISTS (SELECT 1 FROM jobhost_runs o
                  WHERE o.job = p_job AND o.limit_key = p_key AND o.status = 'queued'
                    AND (o.created_at < p_created
                         OR (o.created_at = p_created AND o.id < p_run))))
            OR (j.key_rate_starts IS NOT NULL
                AND (SELECT COUNT(*) FROM jobhost_rate_starts s
                     WHERE s.job = p_job AND s.scope = 1 AND s.key = p_key
                       AND s.at > CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
                           - j.key_rate_period_ms)
                    >= j.key_rate_starts))
        THEN 'key'
    END
    FROM jobhost_jobs j WHERE j.name = p_job
$function$;
REVOKE ALL ON FUNCTION jobhost_held_back(text, text, text, bigint) FROM PUBLIC;
