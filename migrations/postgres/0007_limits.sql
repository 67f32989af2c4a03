-- Flow control (see docs/architecture.md, "Flow control"): sequential jobs and a bound on
-- a run's defers, with the batched claim and ending of migration 0005 carrying them. The
-- SQLite migration of the same number has the same tables and columns.

-- 1 for a job whose runs run one at a time across the fleet (`sequential = true`), set by
-- its registration: the claim, which must see it on every host alike, reads it here.
ALTER TABLE jobhost_jobs ADD COLUMN sequential BIGINT NOT NULL DEFAULT 0;

-- How many passes of the run ended `defer`, kept with the run (and a rerun after a
-- crash) so a host that dies does not reset it; bounded by the job's `max_defers`.
ALTER TABLE jobhost_runs ADD COLUMN defers BIGINT NOT NULL DEFAULT 0;

-- The running runs of a job: what a claim of a sequential job's run looks for.
CREATE INDEX jobhost_runs_running ON jobhost_runs (job) WHERE status = 'running';

-- Wakes every host when a run of a sequential job stops running: its job's queued runs
-- may be claimed now, and no run was queued to say so.
CREATE FUNCTION jobhost_notify_sequential_free() RETURNS TRIGGER
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = NEW.job AND j.sequential = 1) THEN
        PERFORM pg_notify('jobhost_work', '');
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_notify_sequential_free() FROM PUBLIC;
CREATE TRIGGER jobhost_runs_sequential_free
AFTER UPDATE OF status ON jobhost_runs
FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
EXECUTE FUNCTION jobhost_notify_sequential_free();

-- The claim of migration 0005, returning `defers` too, and starting a run of a sequential
-- job only while no other run of it is running.
DROP FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT);
CREATE FUNCTION jobhost_claim_runs(p_host TEXT, p_limit INTEGER, p_terms JSONB, p_run TEXT)
RETURNS TABLE (
    id TEXT, job TEXT, instance TEXT, tenant TEXT, origin TEXT, payload TEXT, status TEXT,
    pass BIGINT, cursor TEXT, counters TEXT, attempts BIGINT, failures BIGINT,
    generation BIGINT, host TEXT, last_code TEXT, last_error TEXT, component_digest TEXT,
    scheduled_for BIGINT, rerun_of TEXT, next_attempt_at BIGINT, created_at BIGINT,
    started_at BIGINT, finished_at BIGINT, updated_at BIGINT, work_done BIGINT, defers BIGINT,
    lease_deadline_at BIGINT, lease_expires_at BIGINT
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_ids TEXT[];
    v_run RECORD;
    v_terms JSONB;
    v_now BIGINT;
    v_generation BIGINT;
    v_deadline BIGINT;
    v_expires BIGINT;
BEGIN
    IF p_run IS NULL THEN
        SELECT array_agg(d.id) INTO v_ids FROM (
            SELECT r.id FROM jobhost_runs r
            WHERE r.status = 'queued' AND r.origin <> 'manual'
              AND r.next_attempt_at <= CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
              AND p_terms ? r.job
              -- Not the runs of a sequential job one of whose runs is running: they
              -- would fill the batch and be passed over, ahead of every other job.
              AND NOT EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = r.job
                  AND j.sequential = 1 AND EXISTS (SELECT 1 FROM jobhost_runs o
                      WHERE o.job = r.job AND o.status = 'running'))
            ORDER BY r.next_attempt_at, r.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ) d;
    ELSE
        -- One run by id: its lease row before the run row, the order every writer that
        -- waits takes (surveillance marks this same run crashed holding its lease).
        PERFORM 1 FROM jobhost_leases l JOIN jobhost_runs r
            ON l.job = r.job AND l.instance = r.instance
        WHERE r.id = p_run
        FOR UPDATE OF l;
        SELECT array_agg(d.id) INTO v_ids FROM (
            SELECT r.id FROM jobhost_runs r
            WHERE r.id = p_run
              AND (r.status = 'queued'
                   OR (r.status = 'running' AND r.host = p_host AND r.generation IS NULL))
            FOR UPDATE
        ) d;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    FOR v_run IN
        SELECT r.id, r.job, r.instance, r.generation FROM jobhost_runs r
        WHERE r.id = ANY (v_ids) ORDER BY r.next_attempt_at, r.id
    LOOP
        -- A sequential job's run starts only while no other run of the job is running.
        -- The check is made under a transaction-scoped advisory lock of the job, by a
        -- statement after the lock is taken (so its snapshot sees every claim that held
        -- the lock before), and the run is set running before the lock is released at
        -- commit: two claims of one job, on any hosts, are ordered, and the second sees
        -- the first's running run. A claim that cannot take the lock at once passes the
        -- run over (another claim is starting a run of the job), so it never waits and
        -- closes no lock cycle. A running run stops counting when it ends, is requeued,
        -- given back, or marked crashed by surveillance once its lease expired.
        IF EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = v_run.job AND j.sequential = 1)
        THEN
            IF NOT pg_try_advisory_xact_lock(724341, hashtext(v_run.job)) THEN
                CONTINUE;
            END IF;
            IF EXISTS (SELECT 1 FROM jobhost_runs o
                       WHERE o.job = v_run.job AND o.status = 'running' AND o.id <> v_run.id)
            THEN
                CONTINUE;
            END IF;
        END IF;
        v_terms := p_terms -> v_run.job;
        v_generation := NULL;
        v_deadline := NULL;
        v_expires := NULL;
        IF v_terms IS NOT NULL THEN
            -- The lease row first: the deadline is stamped after any wait for it.
            PERFORM 1 FROM jobhost_leases l
            WHERE l.job = v_run.job AND l.instance = v_run.instance FOR UPDATE;
            v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
            IF v_run.generation IS NULL THEN
                INSERT INTO jobhost_leases AS l (job, instance, generation, holder, deadline_at,
                    expires_at, pending, updated_at)
                VALUES (v_run.job, v_run.instance, 1, v_run.id,
                    v_now + (v_terms ->> 'deadline_ms')::BIGINT,
                    v_now + (v_terms ->> 'expires_ms')::BIGINT, 0, v_now)
                ON CONFLICT (job, instance) DO UPDATE SET generation = l.generation + 1,
                    holder = excluded.holder, deadline_at = excluded.deadline_at,
                    expires_at = excluded.expires_at, pending = 0, updated_at = excluded.updated_at
                WHERE l.holder IS NULL OR l.expires_at <= v_now
                RETURNING l.generation, l.deadline_at, l.expires_at
                INTO v_generation, v_deadline, v_expires;
            ELSE
                UPDATE jobhost_leases l SET generation = l.generation + 1,
                    deadline_at = v_now + (v_terms ->> 'deadline_ms')::BIGINT,
                    expires_at = v_now + (v_terms ->> 'expires_ms')::BIGINT, updated_at = v_now
                WHERE l.job = v_run.job AND l.instance = v_run.instance
                  AND l.generation = v_run.generation AND l.holder = v_run.id
                RETURNING l.generation, l.deadline_at, l.expires_at
                INTO v_generation, v_deadline, v_expires;
            END IF;
        END IF;
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        RETURN QUERY
        UPDATE jobhost_runs r SET status = 'running', host = p_host,
            generation = COALESCE(v_generation, r.generation),
            attempts = r.attempts + CASE WHEN v_generation IS NULL THEN 0 ELSE 1 END,
            component_digest = CASE WHEN v_generation IS NULL THEN r.component_digest
                ELSE v_terms ->> 'digest' END,
            started_at = COALESCE(r.started_at, v_now), updated_at = v_now
        WHERE r.id = v_run.id
        RETURNING r.id, r.job, r.instance, r.tenant, r.origin, r.payload, r.status, r.pass,
            r.cursor, r.counters, r.attempts, r.failures, r.generation, r.host, r.last_code,
            r.last_error, r.component_digest, r.scheduled_for, r.rerun_of, r.next_attempt_at,
            r.created_at, r.started_at, r.finished_at, r.updated_at, r.work_done, r.defers, v_deadline,
            v_expires;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT) FROM PUBLIC;

-- The ending of migration 0005, writing the run's defers with a requeue.
CREATE OR REPLACE FUNCTION jobhost_record_attempts(p_items JSONB)
RETURNS TABLE (idx INTEGER, result TEXT, follow_up TEXT)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
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
                counters = COALESCE(v.counters, r.counters), finished_at = v_now, updated_at = v_now
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
                    counters = COALESCE(v.counters, r.counters), last_code = v.code, last_error = v.error, updated_at = v_now
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
$$;
REVOKE ALL ON FUNCTION jobhost_record_attempts(JSONB) FROM PUBLIC;
