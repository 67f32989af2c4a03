-- How many runs of `p_job` hold a slot of its `max_per_tenant` for `p_tenant`, or are
-- waiting for one (queued or running), counted under a lock of the job and tenant held to
-- the end of the transaction: two hosts queueing runs of one tenant at once are ordered,
-- and the second counts the first's run. Called by the statement that queues a run
-- (`store::queries`, `queue_run`), only for jobs with a cap.
CREATE OR REPLACE FUNCTION jobhost_active_runs(p_job text, p_tenant text)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(724342, hashtext(p_job || '/' || p_tenant));
    RETURN (SELECT COUNT(*) FROM jobhost_runs o
            WHERE o.job = p_job AND o.tenant = p_tenant AND o.status IN ('queued', 'running'));
END
$function$;
REVOKE ALL ON FUNCTION jobhost_active_runs(TEXT, TEXT) FROM PUBLIC;
