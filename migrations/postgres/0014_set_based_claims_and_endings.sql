-- Claims and endings of attempts set-based: a batch costs a handful of statements, not a
-- handful per run.
--
-- Before, both functions went through their batch one run at a time: four statements per
-- run to start it (its job's sequential flag, its lease row locked, the lease taken or
-- moved on, the run set running) and five per run to record its end, each planned,
-- locked and executed on its own, with the triggers' conditions built again per
-- statement. That per-statement work, not the rows, was most of the database's time per
-- run in a drain.
--
-- A claim now locks the lease rows of all its runs in key order (so two claims of one
-- fleet lock leases in one order), then starts together every run that needs no
-- decision of its own: it takes the fresh runs' leases in one upsert (new rows inserted
-- in key order), moves the retries' on in one update, and sets every run running in one
-- update, all with the conditions of migration 0011 per row. Runs of a sequential job, runs waiting for a slot, and runs
-- that share their lease with another run of the batch keep the one-by-one path of
-- migration 0013, after the others: their outcome depends on the runs before them (a
-- second run of one lease gets none, as it did when it came second).
--
-- An ending of attempts locks the leases of all its items in key order, then records
-- together every `finish` whose run and lease no other item of the batch names:
-- attempts, runs locked in id order, runs, leases, follow-ups and reports in one
-- statement each, every row with the conditions of migration 0007 (the lease at the
-- item's generation and holder; the run running at that generation). Requeues,
-- give-backs and items that share a run or lease keep the one-by-one function of
-- migration 0007, renamed `jobhost_record_attempts_one_by_one`; the jobs' last
-- successes are written last.
--
-- These functions, and the fence every guest commit calls, run with sequential scans
-- priced out (the set-based ones with hash and merge joins too): every statement in them
-- reads a batch of rows by key. A plan that a session cached while a table was small (a
-- new queue's lease table is empty until its first claims) otherwise went on scanning
-- the whole table for every run as it grew: on a new database a 20 000-run drain ran at
-- 1 200-2 600 runs/s with the functions of migrations 0007 and 0013 as they were, and at
-- 6 600-6 800 with sequential scans priced out.
ALTER FUNCTION jobhost_record_attempts(JSONB) RENAME TO jobhost_record_attempts_one_by_one;
ALTER FUNCTION jobhost_record_attempts_one_by_one(JSONB) SET enable_seqscan = off;
ALTER FUNCTION jobhost_fence(TEXT, TEXT, BIGINT, TEXT) SET enable_seqscan = off;

-- One item of `jobhost_record_attempts` (the host's `store::attempts::WireItem`).
CREATE TYPE jobhost_attempt_item AS (
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
);

CREATE FUNCTION jobhost_record_attempts(p_items JSONB)
RETURNS TABLE (idx INTEGER, result TEXT, follow_up TEXT)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
DECLARE
    v_all jobhost_attempt_item[];
    v_items jobhost_attempt_item[];
    v_rest JSONB;
    v_held INTEGER[];
    v_kicked INTEGER[];
    v_ending INTEGER[];
    v_succeeded TEXT[];
    v_now BIGINT;
BEGIN
    WITH e AS MATERIALIZED (
        SELECT e.raw, e.n, jsonb_populate_record(NULL::jobhost_attempt_item, e.raw) AS item
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(raw, n)
    ), s AS MATERIALIZED (
        SELECT e.raw, e.n, e.item,
            (e.item).kind = 'finish'
            AND count(*) OVER (PARTITION BY (e.item).job, (e.item).instance) = 1
            AND count(*) OVER (PARTITION BY (e.item).run_id) = 1 AS together
        FROM e
    )
    SELECT COALESCE(array_agg(s.item), '{}'),
        COALESCE(array_agg(s.item) FILTER (WHERE s.together), '{}'),
        jsonb_agg(s.raw ORDER BY s.n) FILTER (WHERE NOT s.together)
    INTO v_all, v_items, v_rest
    FROM s;
    -- The leases at the items' generations and holders, every item's, locked in key order
    -- before anything else: two batches lock leases in one order.
    SELECT COALESCE(array_agg(h.idx), '{}'),
        COALESCE(array_agg(h.idx) FILTER (WHERE h.pending = 1), '{}')
    INTO v_held, v_kicked
    FROM (
        SELECT i.idx, l.pending FROM unnest(v_all) i
        JOIN jobhost_leases l ON l.job = i.job AND l.instance = i.instance
            AND l.generation = i.generation AND l.holder = i.holder
        ORDER BY l.job, l.instance
        FOR UPDATE OF l
    ) h;
    IF cardinality(v_items) > 0 THEN
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        -- A finish that needs its lease and lost it records nothing.
        INSERT INTO jobhost_attempts AS a (run_id, seq, pass, attempt, generation, host,
            status, outcome, code, fuel_used, peak_memory, duration_ms, log, log_truncated,
            started_at, finished_at)
        SELECT i.run_id, i.seq, i.a_pass, i.a_attempt, i.generation, i.a_host, i.a_status,
            i.a_outcome, i.a_code, i.a_fuel_used, i.a_peak_memory, i.a_duration_ms, i.a_log,
            i.a_log_truncated, i.a_started_at, v_now
        FROM unnest(v_items) i
        WHERE i.seq IS NOT NULL AND (NOT i.require_lease OR i.idx = ANY (v_held))
        ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status,
            outcome = excluded.outcome, code = excluded.code,
            fuel_used = excluded.fuel_used, peak_memory = excluded.peak_memory,
            duration_ms = excluded.duration_ms, log = excluded.log,
            log_truncated = excluded.log_truncated, finished_at = excluded.finished_at;
        -- The runs, locked by their key in key order, then checked (with `status` in the
        -- join the planner may take the partial index of running runs).
        SELECT COALESCE(array_agg(c.idx) FILTER (WHERE c.status = 'running'
            AND c.generation IS NOT DISTINCT FROM c.item_generation), '{}')
        INTO v_ending
        FROM (
            SELECT i.idx, r.status, r.generation, i.generation AS item_generation
            FROM unnest(v_items) i JOIN jobhost_runs r ON r.id = i.run_id
            WHERE NOT i.require_lease OR i.idx = ANY (v_held)
            ORDER BY r.id
            FOR UPDATE OF r
        ) c;
        IF cardinality(v_ending) > 0 THEN
            UPDATE jobhost_runs r SET status = i.status, last_code = i.code,
                last_error = i.error, cursor = i.cursor, pass = i.pass, failures = i.failures,
                counters = COALESCE(i.counters, r.counters), finished_at = v_now,
                updated_at = v_now
            FROM unnest(v_items) i
            WHERE i.idx = ANY (v_ending) AND r.id = i.run_id;
            UPDATE jobhost_leases l SET holder = NULL, pending = 0, deadline_at = v_now,
                expires_at = v_now, updated_at = v_now
            FROM unnest(v_items) i
            WHERE i.idx = ANY (v_ending) AND l.job = i.job AND l.instance = i.instance
              AND l.generation = i.generation;
            -- A kick that came while the attempt ran: the run it was folded into.
            INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
                cursor, component_digest, scheduled_for, rerun_of, next_attempt_at,
                created_at, updated_at)
            SELECT i.f_id, i.job, i.instance, i.f_tenant, i.f_origin, i.f_payload, 'queued',
                i.f_cursor, i.f_component_digest, i.f_scheduled_for, i.f_rerun_of,
                v_now + i.f_delay_ms, v_now, v_now
            FROM unnest(v_items) i
            WHERE i.idx = ANY (v_ending) AND i.idx = ANY (v_kicked) AND i.f_id IS NOT NULL;
            INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at,
                next_try_at)
            SELECT i.r_kind, i.job, i.run_id, i.r_code, i.r_body, v_now, v_now
            FROM unnest(v_items) i
            WHERE i.idx = ANY (v_ending) AND i.r_kind IS NOT NULL;
            v_succeeded := ARRAY(SELECT DISTINCT i.job FROM unnest(v_items) i
                WHERE i.idx = ANY (v_ending) AND i.status = 'succeeded');
        END IF;
        RETURN QUERY
        SELECT i.idx,
            CASE WHEN i.require_lease AND NOT (i.idx = ANY (v_held)) THEN 'lease_lost'
                 WHEN i.idx = ANY (v_ending) THEN 'finished'
                 ELSE 'not_running' END,
            CASE WHEN i.idx = ANY (v_ending) AND i.idx = ANY (v_kicked) THEN i.f_id END
        FROM unnest(v_items) i;
    END IF;
    IF v_rest IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobhost_record_attempts_one_by_one(v_rest);
    END IF;
    -- Last, after every lease and run row is locked. Kept to the second: many successes a
    -- second must not make this row a lock every batch waits for.
    IF cardinality(v_succeeded) > 0 THEN
        UPDATE jobhost_jobs j SET last_success_at = v_now, missed_reported_at = NULL
        WHERE j.name = ANY (v_succeeded)
          AND (j.last_success_at IS NULL OR j.last_success_at < v_now - 1000
               OR j.missed_reported_at IS NOT NULL);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION jobhost_record_attempts(JSONB) FROM PUBLIC;

-- The claim of migration 0013, starting together the runs that need no decision of their
-- own (see the header).
CREATE OR REPLACE FUNCTION jobhost_claim_runs(p_host TEXT, p_limit INTEGER, p_terms JSONB, p_run TEXT,
    p_paused TEXT[], p_tenants TEXT[])
RETURNS TABLE (
    id TEXT, job TEXT, instance TEXT, tenant TEXT, origin TEXT, payload TEXT, status TEXT,
    pass BIGINT, cursor TEXT, counters TEXT, attempts BIGINT, failures BIGINT,
    generation BIGINT, host TEXT, last_code TEXT, last_error TEXT, component_digest TEXT,
    scheduled_for BIGINT, rerun_of TEXT, next_attempt_at BIGINT, created_at BIGINT,
    started_at BIGINT, finished_at BIGINT, updated_at BIGINT, work_done BIGINT, defers BIGINT,
    trace_parent TEXT, lease_deadline_at BIGINT, lease_expires_at BIGINT
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
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
    v_tenants TEXT[];
    v_share INTEGER;
    v_max BIGINT;
    v_sort TEXT;
    v_together TEXT[];
    v_one_by_one TEXT[];
BEGIN
    IF p_run IS NULL THEN
        -- The due runs in claim order straight from an index, whatever the statistics
        -- say: with sorting priced out, no plan of these two statements sorts the queued
        -- runs (see the header).
        v_sort := current_setting('enable_sort');
        PERFORM set_config('enable_sort', 'off', true);
        -- Fair across tenants: of the tenants the host last saw with queued runs
        -- (`p_tenants`, read at most once a second: enumerating them in every claim costs
        -- more than the claim; and those notifications named since), an equal share of the batch from each one's due runs, taken
        -- in turns (every tenant's first run, then every tenant's second...). A tenant with
        -- a backlog of thousands delays another's single run by one turn, not by its
        -- backlog. Not the tenants whose quota holds their runs (`p_paused`).
        v_tenants := ARRAY(SELECT unnest(p_tenants) EXCEPT SELECT unnest(p_paused));
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        IF cardinality(v_tenants) > 1 THEN
            v_share := GREATEST(1, CEIL(p_limit::NUMERIC / cardinality(v_tenants)))::INTEGER;
            SELECT array_agg(f.id) INTO v_ids FROM (
                SELECT d.id FROM (
                    SELECT c.id, c.next_attempt_at, row_number() OVER (
                        PARTITION BY c.tenant ORDER BY c.next_attempt_at, c.id) AS turn
                    FROM unnest(v_tenants) AS q(tenant)
                    CROSS JOIN LATERAL (
                        SELECT r.id, r.tenant, r.next_attempt_at FROM jobhost_runs r
                        WHERE r.status = 'queued' AND r.tenant = q.tenant
                          AND r.origin <> 'manual' AND r.next_attempt_at <= v_now
                          AND p_terms ? r.job
                          -- Not the runs of a sequential job one of whose runs is running:
                          -- they would fill the batch and be passed over.
                          AND NOT EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = r.job
                              AND j.sequential = 1 AND EXISTS (SELECT 1 FROM jobhost_runs o
                                  WHERE o.job = r.job AND o.status = 'running'))
                        ORDER BY r.next_attempt_at, r.id
                        LIMIT v_share
                        FOR UPDATE SKIP LOCKED
                    ) c
                ) d
                ORDER BY d.turn, d.next_attempt_at, d.id
                LIMIT p_limit
            ) f;
        END IF;
        -- The rest of the batch (all of it for one tenant): the most overdue runs of any
        -- tenant not held, so a tenant the host has not seen yet is served too.
        IF COALESCE(cardinality(v_ids), 0) < p_limit THEN
            SELECT COALESCE(v_ids, '{}') || COALESCE(array_agg(d.id), '{}') INTO v_ids FROM (
                SELECT r.id FROM jobhost_runs r
                WHERE r.status = 'queued' AND r.origin <> 'manual'
                  AND r.next_attempt_at <= v_now
                  AND p_terms ? r.job
                  AND NOT (r.tenant = ANY (p_paused))
                  AND NOT (r.id = ANY (COALESCE(v_ids, '{}')))
                  AND NOT EXISTS (SELECT 1 FROM jobhost_jobs j WHERE j.name = r.job
                      AND j.sequential = 1 AND EXISTS (SELECT 1 FROM jobhost_runs o
                          WHERE o.job = r.job AND o.status = 'running'))
                ORDER BY r.next_attempt_at, r.id
                LIMIT p_limit - COALESCE(cardinality(v_ids), 0)
                FOR UPDATE SKIP LOCKED
            ) d;
            IF cardinality(v_ids) = 0 THEN
                v_ids := NULL;
            END IF;
        END IF;
        PERFORM set_config('enable_sort', v_sort, true);
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
    -- The lease rows of every claimed run first, in key order, before any is taken or
    -- moved on: two claims lock leases in one order, and the deadlines are stamped after
    -- any wait.
    PERFORM 1 FROM jobhost_leases l JOIN jobhost_runs r
        ON l.job = r.job AND l.instance = r.instance
    WHERE r.id = ANY (v_ids)
    ORDER BY l.job, l.instance
    FOR UPDATE OF l;
    -- One by one (the loop below): the runs of sequential jobs, the runs waiting for a
    -- slot, and the runs sharing their lease with another run of the batch. The rest
    -- start together.
    SELECT COALESCE(array_agg(s.id) FILTER (WHERE s.together), '{}'),
        COALESCE(array_agg(s.id) FILTER (WHERE NOT s.together), '{}')
    INTO v_together, v_one_by_one
    FROM (
        SELECT r.id, r.waiting = 0
            AND NOT EXISTS (SELECT 1 FROM jobhost_jobs j
                WHERE j.name = r.job AND j.sequential = 1)
            AND count(*) OVER (PARTITION BY r.job, r.instance) = 1 AS together
        FROM jobhost_runs r
        WHERE r.id = ANY (v_ids)
    ) s;
    IF cardinality(v_together) > 0 THEN
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        RETURN QUERY
        WITH taken AS (
            -- A first attempt takes its lease if it is free, or expired and not parked
            -- for a queued run.
            INSERT INTO jobhost_leases AS l (job, instance, generation, holder, deadline_at,
                expires_at, pending, updated_at)
            SELECT r.job, r.instance, 1, r.id,
                v_now + (p_terms -> r.job ->> 'deadline_ms')::BIGINT,
                v_now + (p_terms -> r.job ->> 'expires_ms')::BIGINT, 0, v_now
            FROM jobhost_runs r
            WHERE r.id = ANY (v_together) AND r.generation IS NULL AND p_terms ? r.job
            ORDER BY r.job, r.instance
            ON CONFLICT (job, instance) DO UPDATE SET generation = l.generation + 1,
                holder = excluded.holder, deadline_at = excluded.deadline_at,
                expires_at = excluded.expires_at, pending = 0, updated_at = excluded.updated_at
            WHERE l.holder IS NULL
               OR (l.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM jobhost_runs h
                   WHERE h.id = l.holder AND h.status = 'queued' AND h.origin <> 'manual'
                     AND h.generation = l.generation))
            RETURNING l.holder, l.generation, l.deadline_at, l.expires_at
        ), moved AS (
            -- A later attempt moves its lease on if the run still holds it.
            UPDATE jobhost_leases l SET generation = l.generation + 1,
                deadline_at = v_now + (p_terms -> r.job ->> 'deadline_ms')::BIGINT,
                expires_at = v_now + (p_terms -> r.job ->> 'expires_ms')::BIGINT,
                updated_at = v_now
            FROM jobhost_runs r
            WHERE r.id = ANY (v_together) AND r.generation IS NOT NULL AND p_terms ? r.job
              AND l.job = r.job AND l.instance = r.instance
              AND l.generation = r.generation AND l.holder = r.id
            RETURNING l.holder, l.generation, l.deadline_at, l.expires_at
        ), leased AS (
            SELECT * FROM taken UNION ALL SELECT * FROM moved
        ), started AS (
            UPDATE jobhost_runs r SET status = 'running', host = p_host, waiting = 0,
                generation = COALESCE(x.generation, r.generation),
                attempts = r.attempts + CASE WHEN x.generation IS NULL THEN 0 ELSE 1 END,
                component_digest = CASE WHEN x.generation IS NULL THEN r.component_digest
                    ELSE p_terms -> r.job ->> 'digest' END,
                started_at = COALESCE(r.started_at, v_now), updated_at = v_now
            FROM (
                SELECT t.run_id, ls.generation, ls.deadline_at, ls.expires_at
                FROM unnest(v_together) AS t(run_id)
                LEFT JOIN leased ls ON ls.holder = t.run_id
            ) x
            WHERE r.id = x.run_id
            RETURNING r.id, r.job, r.instance, r.tenant, r.origin, r.payload, r.status,
                r.pass, r.cursor, r.counters, r.attempts, r.failures, r.generation, r.host,
                r.last_code, r.last_error, r.component_digest, r.scheduled_for, r.rerun_of,
                r.next_attempt_at, r.created_at, r.started_at, r.finished_at, r.updated_at,
                r.work_done, r.defers, r.trace_parent, x.deadline_at, x.expires_at
        )
        SELECT * FROM started s ORDER BY s.next_attempt_at, s.id;
    END IF;
    FOR v_run IN
        SELECT r.id, r.job, r.instance, r.tenant, r.generation, r.waiting, r.slot_waits
        FROM jobhost_runs r
        WHERE r.id = ANY (v_one_by_one) ORDER BY r.next_attempt_at, r.id
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
        -- A run waiting for a slot of its job's `max_per_tenant` starts only while fewer
        -- runs of the job and tenant hold one (running, or queued without waiting), under
        -- the lock that queueing takes too (`jobhost_active_runs`); otherwise it waits
        -- again, longer each time (0.5 s doubling to 60 s, with up to half of it taken off
        -- at random), without using an attempt. The SQLite claim does the same
        -- (`store::sqlite_writer`, statements `slot_taken` and `wait_for_slot`).
        IF v_run.waiting = 1 THEN
            SELECT j.max_per_tenant INTO v_max FROM jobhost_jobs j WHERE j.name = v_run.job;
            IF v_max IS NOT NULL THEN
                IF NOT pg_try_advisory_xact_lock(724342, hashtext(v_run.job || '/' || v_run.tenant))
                THEN
                    CONTINUE;
                END IF;
                IF (SELECT COUNT(*) FROM jobhost_runs o
                    WHERE o.job = v_run.job AND o.tenant = v_run.tenant AND o.id <> v_run.id
                      AND (o.status = 'running' OR (o.status = 'queued' AND o.waiting = 0)))
                   >= v_max
                THEN
                    v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
                    UPDATE jobhost_runs r SET slot_waits = r.slot_waits + 1,
                        next_attempt_at = v_now + CAST(LEAST(60000, 500 * power(2, LEAST(r.slot_waits, 7)))
                            * (1 - random() / 2) AS BIGINT),
                        updated_at = v_now
                    WHERE r.id = v_run.id;
                    CONTINUE;
                END IF;
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
                WHERE l.holder IS NULL
                   OR (l.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM jobhost_runs h
                       WHERE h.id = l.holder AND h.status = 'queued' AND h.origin <> 'manual'
                         AND h.generation = l.generation))
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
        UPDATE jobhost_runs r SET status = 'running', host = p_host, waiting = 0,
            generation = COALESCE(v_generation, r.generation),
            attempts = r.attempts + CASE WHEN v_generation IS NULL THEN 0 ELSE 1 END,
            component_digest = CASE WHEN v_generation IS NULL THEN r.component_digest
                ELSE v_terms ->> 'digest' END,
            started_at = COALESCE(r.started_at, v_now), updated_at = v_now
        WHERE r.id = v_run.id
        RETURNING r.id, r.job, r.instance, r.tenant, r.origin, r.payload, r.status, r.pass,
            r.cursor, r.counters, r.attempts, r.failures, r.generation, r.host, r.last_code,
            r.last_error, r.component_digest, r.scheduled_for, r.rerun_of, r.next_attempt_at,
            r.created_at, r.started_at, r.finished_at, r.updated_at, r.work_done, r.defers,
            r.trace_parent, v_deadline,
            v_expires;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT, TEXT[], TEXT[])
    FROM PUBLIC;
