-- Postgres' one implementation of a start: the API's and `host start`'s enqueue (each
-- item of a batch, in the caller's transaction), an application's `jobhost.enqueue`
-- (migration 0037) and a guest's `jobs` calls (`jobhost_start_runs`, after its parent's
-- check) call it, so the unique rule is written once on this backend; `rules::enqueue::decide` is SQLite's, and the store
-- conformance tests hold the two to the same outcomes case by case.
--
-- `p_run` is the run to queue: `id`, `job`, `instance`, `tenant`, `origin`, `payload`
-- (its text), `delay_ms` (from now, priority counted), `trace_parent` and `max_attempts`
-- (the attempts a pass may use, when fewer than its job's; null otherwise); a guest's run
-- also `parent_run`, `parent_attempt`, `parent_pass`, `detached` and `event`. `p_unique`
-- is NULL, or `key`, `while` (`queued`, `active`, `until-finished`, `forever` — an
-- earlier guest's `dedup-key` — or `period`, with `period_ms`) and `on_conflict`
-- (`keep`, `replace` or `debounce`).
--
-- A run whose id exists already (a guest's start made again by a later attempt of its
-- pass) is `joined`, changing nothing. Without a key, a start from outside joins the
-- live run of its job and instance, under the lock of their lease row; a guest's run is
-- queued beside it. With one, the key's row is taken first (`INSERT ... ON CONFLICT DO
-- UPDATE` locks it until the caller commits), so every enqueue of the key on any host is
-- ordered behind the one before; the run it names holds the key or not by `while`, and
-- a held key joins it, or replaces the payload / moves the due time of a run that has not
-- started. Otherwise a run is queued (under its job's `max_per_tenant`, as `queue_run`;
-- over the cap it is recorded skipped with its `dropped` report, or waits for a slot).
--
-- Answers what happened (`created`, `joined`, `replaced`, `debounced`), the run it names,
-- and whether the run it created was dropped by the cap.
CREATE OR REPLACE FUNCTION jobhost_enqueue_run(p_run jsonb, p_unique jsonb)
 RETURNS TABLE(outcome text, run_id text, dropped boolean)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_id TEXT := p_run ->> 'id';
    v_job TEXT := p_run ->> 'job';
    v_instance TEXT := p_run ->> 'instance';
    v_tenant TEXT := p_run ->> 'tenant';
    v_key TEXT := p_unique ->> 'key';
    v_hold TEXT := p_unique ->> 'while';
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_named TEXT;
    v_status TEXT;
    v_started BIGINT;
    v_created BIGINT;
    v_waiting BOOLEAN;
    v_holds BOOLEAN;
    v_over TEXT;
BEGIN
    -- Only a guest's start reuses an id (its pass's, made again); a start from outside
    -- has a fresh one and skips the read.
    IF p_run ->> 'parent_run' IS NOT NULL
       AND EXISTS (SELECT 1 FROM jobhost_runs WHERE id = v_id) THEN
        RETURN QUERY SELECT 'joined'::text, v_id, false;
        RETURN;
    END IF;
    IF p_unique IS NULL AND p_run ->> 'parent_run' IS NULL THEN
        INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at,
            expires_at, pending, updated_at)
        VALUES (v_job, v_instance, 0, NULL, 0, 0, 0, v_now)
        ON CONFLICT (job, instance) DO NOTHING;
        PERFORM 1 FROM jobhost_leases WHERE job = v_job AND instance = v_instance FOR UPDATE;
        SELECT r.id INTO v_named FROM jobhost_runs r
        WHERE r.job = v_job AND r.instance = v_instance AND r.status IN ('queued', 'running')
        ORDER BY r.created_at, r.id LIMIT 1;
        IF v_named IS NOT NULL THEN
            RETURN QUERY SELECT 'joined'::text, v_named, false;
            RETURN;
        END IF;
    ELSIF p_unique IS NOT NULL THEN
        INSERT INTO jobhost_unique_keys AS k (job, tenant, key, run_id)
        VALUES (v_job, v_tenant, v_key, v_id)
        ON CONFLICT (job, tenant, key) DO UPDATE SET run_id = k.run_id
        RETURNING k.run_id INTO v_named;
        IF v_named <> v_id THEN
            SELECT r.status, r.started_at, r.created_at INTO v_status, v_started, v_created
            FROM jobhost_runs r WHERE r.id = v_named;
            IF FOUND THEN
                v_waiting := v_status = 'queued' AND v_started IS NULL;
                v_holds := CASE v_hold
                    WHEN 'queued' THEN v_waiting
                    WHEN 'active' THEN v_waiting OR v_status = 'running'
                    WHEN 'until-finished' THEN v_status IN ('queued', 'running')
                    WHEN 'forever' THEN true
                    ELSE v_created > v_now - CAST(p_unique ->> 'period_ms' AS BIGINT)
                END;
                IF v_holds THEN
                    IF v_waiting AND p_unique ->> 'on_conflict' = 'replace' THEN
                        UPDATE jobhost_runs SET payload = p_run ->> 'payload', updated_at = v_now
                        WHERE id = v_named AND status = 'queued' AND started_at IS NULL;
                        IF FOUND THEN
                            RETURN QUERY SELECT 'replaced'::text, v_named, false;
                            RETURN;
                        END IF;
                    ELSIF v_waiting AND p_unique ->> 'on_conflict' = 'debounce' THEN
                        -- The status set (to what it is) notifies idle hosts of the new
                        -- due time, as a queued run does.
                        UPDATE jobhost_runs SET status = 'queued',
                            next_attempt_at = v_now + CAST(p_run ->> 'delay_ms' AS BIGINT),
                            updated_at = v_now
                        WHERE id = v_named AND status = 'queued' AND started_at IS NULL;
                        IF FOUND THEN
                            RETURN QUERY SELECT 'debounced'::text, v_named, false;
                            RETURN;
                        END IF;
                    END IF;
                    RETURN QUERY SELECT 'joined'::text, v_named, false;
                    RETURN;
                END IF;
            END IF;
            UPDATE jobhost_unique_keys SET run_id = v_id
            WHERE job = v_job AND tenant = v_tenant AND key = v_key;
        END IF;
    END IF;
    SELECT CASE WHEN j.max_per_tenant IS NOT NULL
            AND jobhost_active_runs(v_job, v_tenant) >= j.max_per_tenant
            THEN j.over_limit END
        INTO v_over FROM jobhost_jobs j WHERE j.name = v_job;
    INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
        next_attempt_at, created_at, updated_at, waiting, last_code, finished_at, trace_parent,
        max_attempts, parent_run, parent_attempt, parent_pass, detached, event)
    VALUES (v_id, v_job, v_instance, v_tenant, p_run ->> 'origin', p_run ->> 'payload',
        CASE WHEN v_over = 'skip' THEN 'skipped' ELSE 'queued' END,
        v_now + CAST(p_run ->> 'delay_ms' AS BIGINT), v_now, v_now,
        CASE WHEN v_over = 'defer' THEN 1 ELSE 0 END,
        CASE WHEN v_over = 'skip' THEN 'tenant_limit' END,
        CASE WHEN v_over = 'skip' THEN v_now END, p_run ->> 'trace_parent',
        CAST(p_run ->> 'max_attempts' AS BIGINT), p_run ->> 'parent_run',
        CAST(p_run ->> 'parent_attempt' AS BIGINT), CAST(p_run ->> 'parent_pass' AS BIGINT),
        COALESCE(CAST(p_run ->> 'detached' AS BIGINT), 0), p_run ->> 'event');
    IF v_over = 'skip' THEN
        -- The body `NewReport::about_run` writes for a run dropped by the cap.
        INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at, next_try_at)
        VALUES ('dropped', v_job, v_id, 'tenant_limit',
            json_build_object('code', 'tenant_limit', 'instance', v_instance, 'job', v_job,
                'kind', 'dropped', 'run_id', v_id,
                'trace_id', substr(p_run ->> 'trace_parent', 4, 32))::text,
            v_now, v_now);
    END IF;
    RETURN QUERY SELECT 'created'::text, v_id, v_over IS NOT DISTINCT FROM 'skip';
END
$function$;
REVOKE ALL ON FUNCTION jobhost_enqueue_run(JSONB, JSONB) FROM PUBLIC;
