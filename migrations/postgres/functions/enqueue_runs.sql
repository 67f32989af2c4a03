-- Queues the runs `p_runs` (a JSON array) started by the attempt of run `p_parent` at
-- generation `p_generation` running pass `p_pass`, inside the calling transaction (the
-- guest's, fenced as it commits, or the host's own, fenced first). A run whose id exists
-- already is left alone. Returns the ids it inserted; NULL when the parent no longer runs
-- that pass. A job's role may execute it; guest SQL can never name it (store::pg_statement).
CREATE OR REPLACE FUNCTION jobhost_enqueue_runs(p_parent text, p_generation bigint, p_pass bigint, p_runs jsonb)
 RETURNS text[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_ids TEXT[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobhost_runs WHERE id = p_parent AND status = 'running'
                   AND generation = p_generation AND pass = p_pass) THEN
        RETURN NULL;
    END IF;
    WITH inserted AS (
        INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
            next_attempt_at, created_at, updated_at, trace_parent, parent_run,
            parent_attempt, parent_pass, detached, event)
        SELECT r.id, r.job, r.instance, r.tenant, r.origin, r.payload, 'queued',
            v_now + r.delay_ms, v_now, v_now, r.trace_parent, p_parent, r.parent_attempt,
            p_pass, r.detached, r.event
        FROM jsonb_to_recordset(p_runs) AS r(id TEXT, job TEXT, instance TEXT, tenant TEXT,
            origin TEXT, payload TEXT, delay_ms BIGINT, trace_parent TEXT,
            parent_attempt BIGINT, detached BIGINT, event TEXT)
        ON CONFLICT (id) DO NOTHING
        RETURNING id
    )
    SELECT COALESCE(array_agg(id), ARRAY[]::TEXT[]) INTO v_ids FROM inserted;
    IF EXISTS (SELECT 1 FROM jsonb_to_recordset(p_runs) AS r(detached BIGINT)
               WHERE r.detached = 0) THEN
        UPDATE jobhost_runs SET family = 1 WHERE id = p_parent AND family = 0;
    END IF;
    RETURN v_ids;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_enqueue_runs(TEXT, BIGINT, BIGINT, JSONB) FROM PUBLIC;
