-- A run queued already ended (`skipped` by its job's `max_per_tenant`): its deliveries,
-- one per webhook its job routes that ending to, in the queueing transaction.
CREATE OR REPLACE FUNCTION jobhost_runs_queued_ended()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
BEGIN
    INSERT INTO jobhost_deliveries (run_id, job, tenant, webhook, ending, after_run,
        next_try_at, retry_from, created_at, updated_at)
    SELECT NEW.id, NEW.job, NEW.tenant, r.webhook, NEW.status,
        COALESCE(NEW.retry_of, NEW.rerun_of), v_now, v_now, v_now, v_now
    FROM jobhost_delivery_routes r
    WHERE r.job = NEW.job AND r.ending = NEW.status
    ON CONFLICT (run_id, webhook) DO NOTHING;
    RETURN NULL;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_runs_queued_ended() FROM PUBLIC;
