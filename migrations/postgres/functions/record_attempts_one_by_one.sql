-- The endings that need a decision of their own, one at a time (called by
-- jobhost_record_attempts for the items its set-based path leaves).
CREATE OR REPLACE FUNCTION jobhost_record_attempts_one_by_one(p_items jsonb)
 RETURNS TABLE(idx integer, result text, follow_up text)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET enable_seqscan TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v RECORD;
    v_now BIGINT;
    v_pending BIGINT;
    v_run_status TEXT;
    v_run_generation BIGINT;
    v_succeeded TEXT[] := '{}';
BEGIN
    FOR v IN
        SELECT * FROM jsonb_to_recordset(p_items) AS x(
            idx INTEGER, kind TEXT, run_id TEXT, job TEXT, instance TEXT, generation BIGINT,
            holder TEXT,
            seq BIGINT, a_pass BIGINT, a_attempt BIGINT, a_host TEXT, a_status TEXT,
            a_outcome TEXT, a_code TEXT, a_fuel_used BIGINT, a_peak_memory BIGINT,
            a_duration_ms BIGINT, a_log TEXT, a_log_truncated BIGINT, a_started_at BIGINT,
            require_lease BOOLEAN, status TEXT, code TEXT, error TEXT, cursor TEXT, counters TEXT,
            pass BIGINT, failures BIGINT, defers BIGINT, delay_ms BIGINT, hold_ms BIGINT,
            f_id TEXT, f_tenant TEXT, f_origin TEXT, f_payload TEXT, f_cursor TEXT,
            f_component_digest TEXT, f_scheduled_for BIGINT, f_rerun_of TEXT, f_delay_ms BIGINT,
            r_kind TEXT, r_code TEXT, r_body TEXT
        )
    LOOP
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        SELECT l.pending INTO v_pending FROM jobhost_leases l
        WHERE l.job = v.job AND l.instance = v.instance AND l.generation = v.generation
          AND l.holder = v.holder
        FOR UPDATE;
        IF NOT FOUND THEN
            v_pending := NULL;
        END IF;
        IF v.kind = 'finish' AND v.require_lease AND v_pending IS NULL THEN
            idx := v.idx; result := 'lease_lost'; follow_up := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v.seq IS NOT NULL THEN
            INSERT INTO jobhost_attempts AS a (run_id, seq, pass, attempt, generation, host,
                status, outcome, code, fuel_used, peak_memory, duration_ms, log, log_truncated,
                started_at, finished_at)
            VALUES (v.run_id, v.seq, v.a_pass, v.a_attempt, v.generation, v.a_host, v.a_status,
                v.a_outcome, v.a_code, v.a_fuel_used, v.a_peak_memory, v.a_duration_ms, v.a_log,
                v.a_log_truncated, v.a_started_at, v_now)
            ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status,
                outcome = excluded.outcome, code = excluded.code,
                fuel_used = excluded.fuel_used, peak_memory = excluded.peak_memory,
                duration_ms = excluded.duration_ms, log = excluded.log,
                log_truncated = excluded.log_truncated, finished_at = excluded.finished_at;
        END IF;
        -- By the key alone, then checked: with `status` in the condition the planner
        -- may take the partial index of running runs and filter it for the id.
        SELECT r.status, r.generation INTO v_run_status, v_run_generation
        FROM jobhost_runs r WHERE r.id = v.run_id
        FOR UPDATE;
        IF NOT FOUND OR v_run_status <> 'running'
           OR v_run_generation IS DISTINCT FROM v.generation
           OR (v.kind <> 'finish' AND v_pending IS NULL) THEN
            idx := v.idx; result := 'not_running'; follow_up := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        follow_up := NULL;
        IF v.kind = 'finish' THEN
            UPDATE jobhost_runs r SET status = v.status, last_code = v.code,
                last_error = v.error, cursor = v.cursor, pass = v.pass, failures = v.failures,
                counters = COALESCE(v.counters, r.counters), finished_at = v_now,
                started_at = COALESCE(r.started_at, v.a_started_at), updated_at = v_now
            WHERE r.id = v.run_id;
            UPDATE jobhost_leases l SET holder = NULL, pending = 0, deadline_at = v_now,
                expires_at = v_now, updated_at = v_now
            WHERE l.job = v.job AND l.instance = v.instance AND l.generation = v.generation;
            IF v_pending = 1 AND v.f_id IS NOT NULL THEN
                INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
                    cursor, component_digest, scheduled_for, rerun_of, next_attempt_at,
                    created_at, updated_at)
                VALUES (v.f_id, v.job, v.instance, v.f_tenant, v.f_origin, v.f_payload, 'queued',
                    v.f_cursor, v.f_component_digest, v.f_scheduled_for, v.f_rerun_of,
                    v_now + v.f_delay_ms, v_now, v_now);
                follow_up := v.f_id;
            END IF;
            IF v.status = 'succeeded' AND NOT v.job = ANY (v_succeeded) THEN
                v_succeeded := v_succeeded || v.job;
            END IF;
            IF v.r_kind IS NOT NULL THEN
                INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at,
                    next_try_at)
                VALUES (v.r_kind, v.job, v.run_id, v.r_code, v.r_body, v_now, v_now);
            END IF;
            result := 'finished';
        ELSE
            UPDATE jobhost_leases l SET deadline_at = v_now, expires_at = v_now + v.hold_ms,
                updated_at = v_now
            WHERE l.job = v.job AND l.instance = v.instance AND l.generation = v.generation;
            IF v.kind = 'requeue' THEN
                UPDATE jobhost_runs r SET status = 'queued', next_attempt_at = v_now + v.delay_ms,
                    pass = v.pass, cursor = v.cursor, failures = v.failures, defers = v.defers,
                    counters = COALESCE(v.counters, r.counters), last_code = v.code, last_error = v.error,
                    started_at = COALESCE(r.started_at, v.a_started_at), updated_at = v_now
                WHERE r.id = v.run_id;
            ELSE
                UPDATE jobhost_runs r SET status = 'queued', attempts = r.attempts - 1,
                    updated_at = v_now
                WHERE r.id = v.run_id;
            END IF;
            result := 'requeued';
        END IF;
        idx := v.idx;
        RETURN NEXT;
    END LOOP;
    IF cardinality(v_succeeded) > 0 THEN
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        -- Kept to the second: many successes a second must not make this row a lock every
        -- batch waits for.
        UPDATE jobhost_jobs j SET last_success_at = v_now, missed_reported_at = NULL
        WHERE j.name = ANY (v_succeeded)
          AND (j.last_success_at IS NULL OR j.last_success_at < v_now - 1000
               OR j.missed_reported_at IS NOT NULL);
    END IF;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_record_attempts_one_by_one(JSONB) FROM PUBLIC;
