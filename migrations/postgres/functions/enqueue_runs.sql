-- Queues the runs `p_runs` (a JSON array) started by the attempt of run `p_parent` at
-- generation `p_generation` running pass `p_pass`, inside the calling transaction (the
-- guest's, fenced as it commits, or the host's own, fenced first). A run whose id exists
-- already is left alone. Returns the ids it inserted; NULL when the parent no longer runs
-- that pass. A job's role may execute it; guest SQL can never name it (store::pg_statement).
--
-- Each run is under its job's `max_per_tenant` as new work is (`store::queries`,
-- `queue_run` and `insert_child_run`, its SQLite twin): counted one by one under the lock
-- of `jobhost_active_runs`, so a batch counts its own runs; over the cap it is inserted
-- `skipped` (`tenant_limit`, with its `dropped` report) or waiting for a slot (`defer`).
CREATE OR REPLACE FUNCTION jobhost_enqueue_runs(p_parent text, p_generation bigint, p_pass bigint, p_runs jsonb)
 RETURNS text[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_ids TEXT[] := ARRAY[]::TEXT[];
    v_run RECORD;
    v_over TEXT;
    v_id TEXT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobhost_runs WHERE id = p_parent AND status = 'running'
                   AND generation = p_generation AND pass = p_pass) THEN
        RETURN NULL;
    END IF;
    FOR v_run IN
        SELECT * FROM jsonb_to_recordset(p_runs) AS r(id TEXT, job TEXT, instance TEXT,
            tenant TEXT, origin TEXT, payload TEXT, delay_ms BIGINT, trace_parent TEXT,
            parent_attempt BIGINT, detached BIGINT, event TEXT)
    LOOP
        SELECT CASE WHEN j.max_per_tenant IS NOT NULL
                AND jobhost_active_runs(v_run.job, v_run.tenant) >= j.max_per_tenant
                THEN j.over_limit END
            INTO v_over FROM jobhost_jobs j WHERE j.name = v_run.job;
        INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
            next_attempt_at, created_at, updated_at, trace_parent, parent_run,
            parent_attempt, parent_pass, detached, event, waiting, last_code, finished_at)
        VALUES (v_run.id, v_run.job, v_run.instance, v_run.tenant, v_run.origin,
            v_run.payload, CASE WHEN v_over = 'skip' THEN 'skipped' ELSE 'queued' END,
            v_now + v_run.delay_ms, v_now, v_now, v_run.trace_parent, p_parent,
            v_run.parent_attempt, p_pass, v_run.detached, v_run.event,
            CASE WHEN v_over = 'defer' THEN 1 ELSE 0 END,
            CASE WHEN v_over = 'skip' THEN 'tenant_limit' END,
            CASE WHEN v_over = 'skip' THEN v_now END)
        ON CONFLICT (id) DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            v_ids := v_ids || v_id;
            IF v_over = 'skip' THEN
                -- The body `NewReport::about_run` writes for a run dropped by the cap.
                INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at,
                    next_try_at)
                VALUES ('dropped', v_run.job, v_id, 'tenant_limit',
                    json_build_object('code', 'tenant_limit', 'instance', v_run.instance,
                        'job', v_run.job, 'kind', 'dropped', 'run_id', v_id,
                        'trace_id', substr(v_run.trace_parent, 4, 32))::text,
                    v_now, v_now);
            END IF;
        END IF;
        v_id := NULL;
    END LOOP;
    IF EXISTS (SELECT 1 FROM jsonb_to_recordset(p_runs) AS r(detached BIGINT)
               WHERE r.detached = 0) THEN
        UPDATE jobhost_runs SET family = 1 WHERE id = p_parent AND family = 0;
    END IF;
    RETURN v_ids;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_enqueue_runs(TEXT, BIGINT, BIGINT, JSONB) FROM PUBLIC;
