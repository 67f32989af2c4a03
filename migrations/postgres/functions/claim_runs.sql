-- The claim: leases and starts up to `p_limit` due runs (or the one run `p_run`) for host
-- `p_host`, in turns across the tenants with queued runs (`p_tenants`), passing over the
-- tenants whose quota holds their runs (`p_paused`) and the runs a claim limit holds back
-- (`jobhost_held_back`: `sequential`, `concurrency`, `rate`, per key). Its
-- SQLite twin is `host/src/store/claims/sqlite.rs`, and `host/src/store/claims` calls
-- both. The planner settings keep every read on an index (see migrations 0014 and 0016).
CREATE OR REPLACE FUNCTION jobhost_claim_runs(p_host text, p_limit integer, p_terms jsonb, p_run text, p_paused text[], p_tenants text[])
 RETURNS TABLE(id text, job text, instance text, tenant text, origin text, payload text, status text, pass bigint, cursor text, counters text, attempts bigint, failures bigint, generation bigint, host text, last_code text, last_error text, component_digest text, scheduled_for bigint, rerun_of text, next_attempt_at bigint, created_at bigint, started_at bigint, finished_at bigint, updated_at bigint, work_done bigint, defers bigint, trace_parent text, lease_deadline_at bigint, lease_expires_at bigint)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET jit TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
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
    v_jobs TEXT[];
    v_instances TEXT[];
    v_generations BIGINT[];
    v_all_jobs TEXT[];
    v_all_instances TEXT[];
    v_limited TEXT[];
    v_job_wide TEXT[];
    v_keyed TEXT[];
    v_rated TEXT[];
    v_busy TEXT[];
    v_held TEXT;
    v_c_jobs TEXT[];
    v_c_instances TEXT[];
    v_c_generations BIGINT[];
    v_c_waiting BIGINT[];
    v_fifo TEXT[];
    v_batch INTEGER;
    v_l_ids TEXT[];
    v_l_jobs TEXT[];
    v_l_instances TEXT[];
    v_l_generations BIGINT[];
    v_l_keys TEXT[];
    v_l_created BIGINT[];
    v_l_key_held BOOLEAN[];
    v_lock_jobs TEXT[];
    v_window_jobs TEXT[];
    v_window_keys TEXT[];
BEGIN
    -- The jobs with a claim limit (`v_limited`): those limited as a whole (`sequential`,
    -- `concurrency`, `rate`: `v_job_wide`), per key (`v_keyed`, `v_fifo` in queue order),
    -- with a rate (`v_rated`), and those a limit of the whole job holds back now
    -- (`v_busy`), read once for the whole claim instead of for each candidate. Passing
    -- over held runs in the choice is only an optimisation (see below): the runs chosen
    -- are checked again under their job's and their key's locks.
    SELECT COALESCE(array_agg(j.name), '{}'),
        COALESCE(array_agg(j.name) FILTER (WHERE j.sequential = 1
            OR j.concurrency IS NOT NULL OR j.rate_starts IS NOT NULL), '{}'),
        COALESCE(array_agg(j.name) FILTER (WHERE j.key_by IS NOT NULL AND (j.fifo = 1
            OR j.key_concurrency IS NOT NULL OR j.key_rate_starts IS NOT NULL)), '{}'),
        COALESCE(array_agg(j.name) FILTER (WHERE j.key_by IS NOT NULL AND j.fifo = 1), '{}'),
        COALESCE(array_agg(j.name) FILTER (WHERE j.rate_starts IS NOT NULL
            OR j.key_rate_starts IS NOT NULL), '{}')
    INTO v_limited, v_job_wide, v_keyed, v_fifo, v_rated
    FROM jobhost_jobs j
    WHERE j.sequential = 1 OR j.concurrency IS NOT NULL OR j.rate_starts IS NOT NULL
       OR j.key_by IS NOT NULL;
    v_busy := '{}';
    v_batch := p_limit;
    IF cardinality(v_job_wide) > 0 THEN
        v_busy := ARRAY(SELECT j FROM unnest(v_job_wide) AS j
            WHERE jobhost_held_back(j, NULL, NULL, NULL) IS NOT NULL);
        -- When the host claims for one job limited as a whole and not per key (the others
        -- it claims for, if any, held now), no claim can start more of it than its limit
        -- (`concurrency`, 1 for `sequential`, `rate`), so it chooses no more: a host with
        -- many idle workers otherwise locked and read hundreds of runs to start the few a
        -- `concurrency` lets start. (With two such jobs, a cap of the sum could fill the
        -- batch with one's runs; with a key, with runs of a key that is full.)
        SELECT LEAST(p_limit, CASE WHEN bool_and(j.name = ANY (v_job_wide))
            AND NOT bool_or(j.name = ANY (v_keyed))
            AND count(*) FILTER (WHERE NOT (j.name = ANY (v_busy))) <= 1 THEN
            sum(CASE WHEN j.name = ANY (v_busy) THEN 0 ELSE LEAST(
                CASE WHEN j.sequential = 1 OR j.concurrency IS NOT NULL
                    THEN COALESCE(j.concurrency, 1) END,
                j.rate_starts) END) END)
        INTO v_batch
        FROM jsonb_object_keys(p_terms) AS t(name) LEFT JOIN jobhost_jobs j ON j.name = t.name;
        v_batch := COALESCE(v_batch, p_limit);
    END IF;
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
            v_share := GREATEST(1, CEIL(v_batch::NUMERIC / cardinality(v_tenants)))::INTEGER;
            SELECT array_agg(f.id), array_agg(f.job), array_agg(f.instance),
                array_agg(f.generation), array_agg(f.waiting)
            INTO v_ids, v_c_jobs, v_c_instances, v_c_generations, v_c_waiting FROM (
                SELECT d.id, d.job, d.instance, d.generation, d.waiting FROM (
                    SELECT c.id, c.job, c.instance, c.generation, c.waiting,
                        c.next_attempt_at, row_number() OVER (
                        PARTITION BY c.tenant ORDER BY c.next_attempt_at, c.id) AS turn
                    FROM unnest(v_tenants) AS q(tenant)
                    CROSS JOIN LATERAL (
                        SELECT r.id, r.tenant, r.next_attempt_at, r.job, r.instance,
                            r.generation, r.waiting
                        FROM jobhost_runs r
                        WHERE r.status = 'queued' AND r.tenant = q.tenant
                          AND r.origin <> 'manual' AND r.next_attempt_at <= v_now
                          AND p_terms ? r.job
                          -- Not the runs a claim limit holds back: they would fill the
                          -- batch and be passed over.
                          AND NOT (r.job = ANY (v_busy))
                          AND (NOT (r.job = ANY (v_keyed))
                               OR jobhost_held_back(r.job, r.id, r.limit_key, r.created_at) IS NULL)
                        ORDER BY r.next_attempt_at, r.id
                        LIMIT v_share
                        FOR UPDATE SKIP LOCKED
                    ) c
                ) d
                ORDER BY d.turn, d.next_attempt_at, d.id
                LIMIT v_batch
            ) f;
        END IF;
        -- The rest of the batch (all of it for one tenant): the most overdue runs of any
        -- tenant not held, so a tenant the host has not seen yet is served too.
        IF COALESCE(cardinality(v_ids), 0) < v_batch THEN
            SELECT COALESCE(v_ids, '{}') || COALESCE(array_agg(d.id), '{}'),
                COALESCE(v_c_jobs, '{}') || COALESCE(array_agg(d.job), '{}'),
                COALESCE(v_c_instances, '{}') || COALESCE(array_agg(d.instance), '{}'),
                COALESCE(v_c_generations, '{}') || COALESCE(array_agg(d.generation), '{}'),
                COALESCE(v_c_waiting, '{}') || COALESCE(array_agg(d.waiting), '{}')
            INTO v_ids, v_c_jobs, v_c_instances, v_c_generations, v_c_waiting FROM (
                SELECT r.id, r.job, r.instance, r.generation, r.waiting FROM jobhost_runs r
                WHERE r.status = 'queued' AND r.origin <> 'manual'
                  AND r.next_attempt_at <= v_now
                  AND p_terms ? r.job
                  AND NOT (r.tenant = ANY (p_paused))
                  AND NOT (r.id = ANY (COALESCE(v_ids, '{}')))
                  AND NOT (r.job = ANY (v_busy))
                  AND (NOT (r.job = ANY (v_keyed))
                       OR jobhost_held_back(r.job, r.id, r.limit_key, r.created_at) IS NULL)
                ORDER BY r.next_attempt_at, r.id
                LIMIT v_batch - COALESCE(cardinality(v_ids), 0)
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
        SELECT array_agg(d.id), array_agg(d.job), array_agg(d.instance),
            array_agg(d.generation), array_agg(d.waiting)
        INTO v_ids, v_c_jobs, v_c_instances, v_c_generations, v_c_waiting FROM (
            SELECT r.id, r.job, r.instance, r.generation, r.waiting FROM jobhost_runs r
            WHERE r.id = p_run
              AND (r.status = 'queued'
                   OR (r.status = 'running' AND r.host = p_host AND r.generation IS NULL))
            FOR UPDATE
        ) d;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- Each claimed run's job, instance and generation, as the choice read them from the
    -- rows it locked, and how it starts: the runs waiting for a slot and the runs sharing
    -- their lease with another run of the batch one by one (the loop below); the runs of
    -- jobs with a claim limit together with the rest once the limits let them (below).
    SELECT COALESCE(array_agg(s.id ORDER BY s.id) FILTER (WHERE s.way = 0), '{}'),
        COALESCE(array_agg(s.job ORDER BY s.id) FILTER (WHERE s.way = 0), '{}'),
        COALESCE(array_agg(s.instance ORDER BY s.id) FILTER (WHERE s.way = 0), '{}'),
        COALESCE(array_agg(s.generation ORDER BY s.id) FILTER (WHERE s.way = 0), '{}'),
        COALESCE(array_agg(s.id) FILTER (WHERE s.way = 1), '{}'),
        COALESCE(array_agg(s.id) FILTER (WHERE s.way = 2), '{}'),
        array_agg(s.job), array_agg(s.instance)
    INTO v_together, v_jobs, v_instances, v_generations, v_l_ids, v_one_by_one, v_all_jobs,
        v_all_instances
    FROM (
        SELECT k.id, k.job, k.instance, k.generation, CASE
            WHEN k.waiting <> 0 OR count(*) OVER (PARTITION BY k.job, k.instance) > 1 THEN 2
            WHEN k.job = ANY (v_limited) THEN 1
            ELSE 0 END AS way
        FROM unnest(v_ids, v_c_jobs, v_c_instances, v_c_generations, v_c_waiting)
            AS k(id, job, instance, generation, waiting)
    ) s;
    -- The lease rows of every claimed run first, in key order, before any is taken or
    -- moved on: two claims lock leases in one order, and the deadlines are stamped after
    -- any wait.
    PERFORM 1 FROM unnest(v_all_jobs, v_all_instances) AS k(job, instance)
        JOIN jobhost_leases l ON l.job = k.job AND l.instance = k.instance
    ORDER BY l.job, l.instance
    FOR UPDATE OF l;
    -- The runs of jobs with a claim limit, decided for the whole batch at once (the rule of
    -- `jobhost_held_back`, per job and key instead of per run). Under transaction-scoped
    -- advisory locks — one per job limited as a whole, one per key, each taken once, in
    -- name order — a statement after the locks (so its snapshot sees every claim that held
    -- them before) counts each job's and key's free slots once: `concurrency` (or 1 for
    -- `sequential`) less its running runs, a rate less the starts in its window, per key
    -- likewise, and with `fifo` only the key's oldest queued run. Of each key's candidates
    -- the first ones in due order take its free slots, then of each job's survivors the
    -- first ones take the job's: the runs a one-by-one check in due order would start.
    -- They start with the rest, and enter their starts into the windows, before the locks
    -- are released at commit, so two claims of one job or key, on any hosts, are ordered.
    -- A lock another claim holds is never waited for: its job's or key's runs are passed
    -- over, so the locks close no lock cycle.
    IF cardinality(v_l_ids) > 0 THEN
        SELECT array_agg(r.id ORDER BY r.next_attempt_at, r.id),
            array_agg(r.job ORDER BY r.next_attempt_at, r.id),
            array_agg(r.instance ORDER BY r.next_attempt_at, r.id),
            array_agg(r.generation ORDER BY r.next_attempt_at, r.id),
            array_agg(r.limit_key ORDER BY r.next_attempt_at, r.id),
            array_agg(r.created_at ORDER BY r.next_attempt_at, r.id)
        INTO v_l_ids, v_l_jobs, v_l_instances, v_l_generations, v_l_keys, v_l_created
        FROM unnest(v_l_ids) AS u(id) JOIN jobhost_runs r ON r.id = u.id;
        v_lock_jobs := '{}';
        IF v_l_jobs && v_job_wide THEN
            v_lock_jobs := ARRAY(SELECT t.job FROM (
                SELECT DISTINCT u.job FROM unnest(v_l_jobs) AS u(job)
                WHERE u.job = ANY (v_job_wide) AND NOT (u.job = ANY (v_busy))
                ORDER BY u.job) t
                WHERE pg_try_advisory_xact_lock(724341, hashtext(t.job)));
        END IF;
        -- Per candidate, in due order: whether its key's lock is held (true when it needs
        -- none), taken once per key on the key's first candidate.
        v_l_key_held := '{}';
        IF v_l_jobs && v_keyed THEN
            SELECT array_agg(COALESCE(g.held, true) ORDER BY g.ord) INTO v_l_key_held FROM (
                SELECT y.ord, bool_or(y.took) OVER (PARTITION BY y.job, y.key) AS held FROM (
                    SELECT x.ord, x.job, x.key, CASE WHEN x.first
                        THEN pg_try_advisory_xact_lock(724343, hashtext(x.job || '/' || x.key))
                        END AS took
                    FROM (
                        SELECT u.ord, u.job, u.key, u.key IS NOT NULL AND u.job = ANY (v_keyed)
                            AND NOT (u.job = ANY (v_busy))
                            AND (NOT (u.job = ANY (v_job_wide)) OR u.job = ANY (v_lock_jobs))
                            AND row_number() OVER (PARTITION BY u.job, u.key ORDER BY u.ord) = 1
                            AS first
                        FROM unnest(v_l_jobs, v_l_keys) WITH ORDINALITY AS u(job, key, ord)
                        ORDER BY u.job, u.key, u.ord
                    ) x
                ) y
            ) g;
        END IF;
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        WITH c AS (
            SELECT u.ord, u.id, u.job, u.instance, u.generation, u.key
            FROM unnest(v_l_ids, v_l_jobs, v_l_instances, v_l_generations, v_l_keys,
                v_l_created, v_l_key_held)
                WITH ORDINALITY AS u(id, job, instance, generation, key, created, held, ord)
            WHERE COALESCE(u.held, true) AND NOT (u.job = ANY (v_busy))
              AND (NOT (u.job = ANY (v_job_wide)) OR u.job = ANY (v_lock_jobs))
              -- `fifo`: only the key's oldest queued run may start.
              AND NOT (u.key IS NOT NULL AND u.job = ANY (v_fifo) AND EXISTS (
                  SELECT 1 FROM jobhost_runs o
                  WHERE o.job = u.job AND o.limit_key = u.key AND o.status = 'queued'
                    AND (o.created_at < u.created OR (o.created_at = u.created AND o.id < u.id))))
        ), by_key AS (
            SELECT c.*, row_number() OVER (PARTITION BY c.job, c.key ORDER BY c.ord) AS rank
            FROM c
        ), key_free AS (
            -- The key's free slots, counted on its first candidate only.
            SELECT b.*, max(CASE WHEN b.rank = 1 AND b.key IS NOT NULL AND b.job = ANY (v_keyed)
                THEN (SELECT LEAST(
                    CASE WHEN j.fifo = 1 OR j.key_concurrency IS NOT NULL THEN
                        CASE WHEN j.fifo = 1 THEN 1 ELSE j.key_concurrency END
                        - (SELECT COUNT(*) FROM jobhost_runs o
                           WHERE o.job = b.job AND o.limit_key = b.key AND o.status = 'running'
                             AND o.id IS DISTINCT FROM p_run) END,
                    CASE WHEN j.key_rate_starts IS NOT NULL THEN j.key_rate_starts
                        - (SELECT COUNT(*) FROM jobhost_rate_starts s
                           WHERE s.job = b.job AND s.scope = 1 AND s.key = b.key
                             AND s.at > v_now - j.key_rate_period_ms) END)
                    FROM jobhost_jobs j WHERE j.name = b.job) END)
                OVER (PARTITION BY b.job, b.key) AS key_slots
            FROM by_key b
        ), by_job AS (
            SELECT k.*, row_number() OVER (PARTITION BY k.job ORDER BY k.ord) AS job_rank
            FROM key_free k WHERE k.key_slots IS NULL OR k.rank <= k.key_slots
        ), job_free AS (
            -- The job's free slots, counted on its first candidate only.
            SELECT b.*, max(CASE WHEN b.job_rank = 1 AND b.job = ANY (v_job_wide)
                THEN (SELECT LEAST(
                    CASE WHEN j.sequential = 1 OR j.concurrency IS NOT NULL THEN
                        COALESCE(j.concurrency, 1)
                        - (SELECT COUNT(*) FROM jobhost_runs o
                           WHERE o.job = b.job AND o.status = 'running'
                             AND o.id IS DISTINCT FROM p_run) END,
                    CASE WHEN j.rate_starts IS NOT NULL THEN j.rate_starts
                        - (SELECT COUNT(*) FROM jobhost_rate_starts s
                           WHERE s.job = b.job AND s.scope = 0 AND s.key = ''
                             AND s.at > v_now - j.rate_period_ms) END)
                    FROM jobhost_jobs j WHERE j.name = b.job) END)
                OVER (PARTITION BY b.job) AS job_slots
            FROM by_job b
        )
        SELECT COALESCE(array_agg(a.id ORDER BY a.id), '{}'),
            COALESCE(array_agg(a.job ORDER BY a.id), '{}'),
            COALESCE(array_agg(a.instance ORDER BY a.id), '{}'),
            COALESCE(array_agg(a.generation ORDER BY a.id), '{}'),
            COALESCE(array_agg(a.key ORDER BY a.id) FILTER (WHERE a.job = ANY (v_rated)), '{}'),
            COALESCE(array_agg(a.job ORDER BY a.id) FILTER (WHERE a.job = ANY (v_rated)), '{}')
        INTO v_l_ids, v_l_jobs, v_l_instances, v_l_generations, v_window_keys, v_window_jobs
        FROM (
            SELECT t.id, t.job, t.instance, t.generation, NULL AS key
            FROM unnest(v_together, v_jobs, v_instances, v_generations)
                AS t(id, job, instance, generation)
            UNION ALL
            SELECT f.id, f.job, f.instance, f.generation, f.key FROM job_free f
            WHERE f.job_slots IS NULL OR f.job_rank <= f.job_slots
        ) a;
        v_together := v_l_ids;
        v_jobs := v_l_jobs;
        v_instances := v_l_instances;
        v_generations := v_l_generations;
    END IF;
    IF cardinality(v_together) > 0 THEN
        v_now := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
        -- A first attempt takes its lease if it is free, or expired and not parked for a
        -- queued run.
        IF EXISTS (SELECT 1 FROM unnest(v_generations) AS g WHERE g IS NULL) THEN
            INSERT INTO jobhost_leases AS l (job, instance, generation, holder, deadline_at,
                expires_at, pending, updated_at)
            SELECT t.job, t.instance, 1, t.run_id,
                v_now + (p_terms -> t.job ->> 'deadline_ms')::BIGINT,
                v_now + (p_terms -> t.job ->> 'expires_ms')::BIGINT, 0, v_now
            FROM unnest(v_together, v_jobs, v_instances, v_generations)
                AS t(run_id, job, instance, generation)
            WHERE t.generation IS NULL AND p_terms ? t.job
            ORDER BY t.job, t.instance
            ON CONFLICT (job, instance) DO UPDATE SET generation = l.generation + 1,
                holder = excluded.holder, deadline_at = excluded.deadline_at,
                expires_at = excluded.expires_at, pending = 0,
                updated_at = excluded.updated_at
            WHERE l.holder IS NULL
               OR (l.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM jobhost_runs h
                   WHERE h.id = l.holder AND h.status = 'queued' AND h.origin <> 'manual'
                     AND h.generation = l.generation));
        END IF;
        -- A later attempt moves its lease on if the run still holds it.
        IF EXISTS (SELECT 1 FROM unnest(v_generations) AS g WHERE g IS NOT NULL) THEN
            UPDATE jobhost_leases l SET generation = l.generation + 1,
                deadline_at = v_now + (p_terms -> t.job ->> 'deadline_ms')::BIGINT,
                expires_at = v_now + (p_terms -> t.job ->> 'expires_ms')::BIGINT,
                updated_at = v_now
            FROM unnest(v_together, v_jobs, v_instances, v_generations)
                AS t(run_id, job, instance, generation)
            WHERE t.generation IS NOT NULL AND p_terms ? t.job
              AND l.job = t.job AND l.instance = t.instance
              AND l.generation = t.generation AND l.holder = t.run_id;
        END IF;
        -- Every run starts, with the lease the two statements above gave it, found by its
        -- key: the run holds it at the generation after its last (a first attempt: a run
        -- that never held a lease holds one now only if it was just taken).
        RETURN QUERY
        WITH started AS (
            UPDATE jobhost_runs r SET status = 'running', host = p_host, waiting = 0,
                generation = COALESCE(x.generation, r.generation),
                attempts = r.attempts + CASE WHEN x.generation IS NULL THEN 0 ELSE 1 END,
                component_digest = CASE WHEN x.generation IS NULL THEN r.component_digest
                    ELSE p_terms -> r.job ->> 'digest' END,
                guest_started_at = NULL, updated_at = v_now
            FROM (
                SELECT t.run_id, l.generation, l.deadline_at, l.expires_at
                FROM unnest(v_together, v_jobs, v_instances, v_generations)
                    AS t(run_id, job, instance, generation)
                LEFT JOIN jobhost_leases l ON l.job = t.job AND l.instance = t.instance
                    AND l.holder = t.run_id
                    AND (t.generation IS NULL OR l.generation = t.generation + 1)
                    AND p_terms ? t.job
            ) x
            WHERE r.id = x.run_id
            RETURNING r.id, r.job, r.instance, r.tenant, r.origin, r.payload, r.status,
                r.pass, r.cursor, r.counters, r.attempts, r.failures, r.generation, r.host,
                r.last_code, r.last_error, r.component_digest, r.scheduled_for, r.rerun_of,
                r.next_attempt_at, r.created_at, r.started_at, r.finished_at, r.updated_at,
                r.work_done, r.defers, r.trace_parent, x.deadline_at, x.expires_at
        )
        SELECT * FROM started s ORDER BY s.next_attempt_at, s.id;
        -- The starts of rated jobs enter their windows (under the locks above); the rows no
        -- window holds any more go, those another claim has locked skipped.
        IF cardinality(v_window_jobs) > 0 THEN
            INSERT INTO jobhost_rate_starts (job, scope, key, at)
            SELECT j.name, 0, '', v_now
            FROM unnest(v_window_jobs) AS w(job) JOIN jobhost_jobs j ON j.name = w.job
            WHERE j.rate_starts IS NOT NULL
            UNION ALL
            SELECT j.name, 1, w.key, v_now
            FROM unnest(v_window_jobs, v_window_keys) AS w(job, key)
                JOIN jobhost_jobs j ON j.name = w.job
            WHERE j.key_rate_starts IS NOT NULL AND w.key IS NOT NULL;
            DELETE FROM jobhost_rate_starts d WHERE d.ctid = ANY (ARRAY(
                SELECT s.ctid FROM jobhost_rate_starts s JOIN jobhost_jobs j ON j.name = s.job
                WHERE s.job = ANY (v_window_jobs)
                  AND s.at <= v_now - LEAST(j.rate_period_ms, j.key_rate_period_ms)
                  AND s.at <= v_now - CASE WHEN s.scope = 0 THEN j.rate_period_ms
                      ELSE j.key_rate_period_ms END
                LIMIT 64 * cardinality(v_window_jobs)
                FOR UPDATE OF s SKIP LOCKED));
        END IF;
    END IF;
    IF cardinality(v_one_by_one) = 0 THEN
        RETURN;
    END IF;
    FOR v_run IN
        SELECT r.id, r.job, r.instance, r.tenant, r.generation, r.waiting, r.slot_waits,
            r.limit_key, r.created_at
        FROM jobhost_runs r
        WHERE r.id = ANY (v_one_by_one) ORDER BY r.next_attempt_at, r.id
    LOOP
        -- A run of a job with a claim limit that starts one by one (waiting for a slot, or
        -- sharing its lease) is checked on its own by the same rule (`jobhost_held_back`)
        -- under the same locks (taken again, or first, here; a lock the claim holds is
        -- taken again at once), by a statement after them, so it sees the batch's starts
        -- above and the loop's before it. A running run stops counting when it ends, is
        -- requeued, given back, or marked crashed by surveillance once its lease expired.
        IF v_run.job = ANY (v_limited) THEN
            -- Once the whole job is held, its other candidates are passed over unchecked.
            IF v_run.job = ANY (v_busy) THEN
                CONTINUE;
            END IF;
            IF v_run.job = ANY (v_job_wide) THEN
                IF NOT pg_try_advisory_xact_lock(724341, hashtext(v_run.job)) THEN
                    CONTINUE;
                END IF;
            END IF;
            IF v_run.limit_key IS NOT NULL AND v_run.job = ANY (v_keyed) THEN
                IF NOT pg_try_advisory_xact_lock(724343, hashtext(v_run.job || '/' || v_run.limit_key))
                THEN
                    CONTINUE;
                END IF;
            END IF;
            v_held := jobhost_held_back(v_run.job, v_run.id, v_run.limit_key, v_run.created_at);
            IF v_held IS NOT NULL THEN
                IF v_held <> 'key' THEN
                    v_busy := v_busy || v_run.job;
                END IF;
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
            guest_started_at = NULL, updated_at = v_now
        WHERE r.id = v_run.id
        RETURNING r.id, r.job, r.instance, r.tenant, r.origin, r.payload, r.status, r.pass,
            r.cursor, r.counters, r.attempts, r.failures, r.generation, r.host, r.last_code,
            r.last_error, r.component_digest, r.scheduled_for, r.rerun_of, r.next_attempt_at,
            r.created_at, r.started_at, r.finished_at, r.updated_at, r.work_done, r.defers,
            r.trace_parent, v_deadline,
            v_expires;
        -- A start enters the windows of its job's rates (under the locks above); the rows
        -- no window holds any more go, those another claim has locked skipped.
        IF FOUND AND v_run.job = ANY (v_rated) THEN
            INSERT INTO jobhost_rate_starts (job, scope, key, at)
            SELECT j.name, 0, '', v_now FROM jobhost_jobs j
            WHERE j.name = v_run.job AND j.rate_starts IS NOT NULL
            UNION ALL
            SELECT j.name, 1, v_run.limit_key, v_now FROM jobhost_jobs j
            WHERE j.name = v_run.job AND j.key_rate_starts IS NOT NULL
              AND v_run.limit_key IS NOT NULL;
            DELETE FROM jobhost_rate_starts d WHERE d.ctid = ANY (ARRAY(
                SELECT s.ctid FROM jobhost_rate_starts s JOIN jobhost_jobs j ON j.name = s.job
                WHERE s.job = v_run.job
                  AND s.at <= v_now - LEAST(j.rate_period_ms, j.key_rate_period_ms)
                  AND s.at <= v_now - CASE WHEN s.scope = 0 THEN j.rate_period_ms
                      ELSE j.key_rate_period_ms END
                LIMIT 64
                FOR UPDATE OF s SKIP LOCKED));
        END IF;
    END LOOP;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT, TEXT[], TEXT[]) FROM PUBLIC;
