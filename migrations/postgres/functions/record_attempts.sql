-- The endings of a batch of attempts, set-based: each run's row read and written once.
-- The array form reads `jobhost_attempt_item` in the binary format (parsing JSON cost
-- about 15 µs an ending); the JSON form stays for hosts of an earlier version. Its SQLite
-- twin is `host/src/store/claims/sqlite.rs`.
CREATE OR REPLACE FUNCTION jobhost_record_attempts(p_items jobhost_attempt_item[])
 RETURNS TABLE(idx integer, result text, follow_up text)
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
    v_all jobhost_attempt_item[];
    v_items jobhost_attempt_item[];
    v_rest JSONB;
    v_held INTEGER[];
    v_kicked INTEGER[];
    v_ending INTEGER[];
    v_recording jobhost_attempt_item[];
    v_ended jobhost_attempt_item[];
    v_succeeded TEXT[];
    v_now BIGINT;
BEGIN
    WITH e AS MATERIALIZED (
        -- Each item and its place, in step (the array is walked once).
        SELECT unnest(p_items) AS item, generate_subscripts(p_items, 1) AS n
    ), s AS MATERIALIZED (
        SELECT e.n, e.item,
            (e.item).kind = 'finish'
            AND count(*) OVER (PARTITION BY (e.item).job, (e.item).instance) = 1
            AND count(*) OVER (PARTITION BY (e.item).run_id) = 1 AS together
        FROM e
    )
    SELECT COALESCE(array_agg(s.item), '{}'),
        COALESCE(array_agg(s.item) FILTER (WHERE s.together), '{}'),
        jsonb_agg(to_jsonb(s.item) ORDER BY s.n) FILTER (WHERE NOT s.together)
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
        -- A finish that needs its lease and lost it records nothing. The items kept and
        -- then those ended are carried as arrays of items, so each statement below reads
        -- its rows without testing every item against a list of the others.
        v_recording := ARRAY(SELECT i FROM unnest(v_items) i
            WHERE NOT i.require_lease OR i.idx = ANY (v_held));
        INSERT INTO jobhost_attempts AS a (run_id, seq, pass, attempt, generation, host,
            status, outcome, code, fuel_used, peak_memory, duration_ms, log, log_truncated,
            started_at, finished_at)
        SELECT i.run_id, i.seq, i.a_pass, i.a_attempt, i.generation, i.a_host, i.a_status,
            i.a_outcome, i.a_code, i.a_fuel_used, i.a_peak_memory, i.a_duration_ms, i.a_log,
            i.a_log_truncated, i.a_started_at, v_now
        FROM unnest(v_recording) i
        WHERE i.seq IS NOT NULL
        ON CONFLICT (run_id, seq) DO UPDATE SET status = excluded.status,
            outcome = excluded.outcome, code = excluded.code,
            fuel_used = excluded.fuel_used, peak_memory = excluded.peak_memory,
            duration_ms = excluded.duration_ms, log = excluded.log,
            log_truncated = excluded.log_truncated, finished_at = excluded.finished_at;
        -- The runs still running the items' attempts end, changed in key order by the
        -- statement that checks them (a row changed meanwhile is checked again as it is
        -- now): the items of the runs changed are those ended. The check is a CASE so that
        -- no index of running runs can drive the join (all running runs against each
        -- item): the batch's items, in key order, must. A run whose guest start is not
        -- written yet (`runs::runner::starts`) takes its start from its attempt.
        WITH ended AS (
            UPDATE jobhost_runs r SET status = (k.item).status, last_code = (k.item).code,
                last_error = (k.item).error, cursor = (k.item).cursor,
                pass = (k.item).pass, failures = (k.item).failures,
                counters = COALESCE((k.item).counters, r.counters), finished_at = v_now,
                started_at = COALESCE(r.started_at, (k.item).a_started_at), updated_at = v_now
            FROM (SELECT i AS item FROM unnest(v_recording) i ORDER BY i.run_id) k
            WHERE r.id = (k.item).run_id
              AND CASE WHEN r.status = 'running'
                  THEN r.generation IS NOT DISTINCT FROM (k.item).generation ELSE false END
            RETURNING k.item
        )
        SELECT COALESCE(array_agg(e.item), '{}') INTO v_ended FROM ended e;
        IF cardinality(v_ended) > 0 THEN
            UPDATE jobhost_leases l SET holder = NULL, pending = 0, deadline_at = v_now,
                expires_at = v_now, updated_at = v_now
            FROM unnest(v_ended) i
            WHERE l.job = i.job AND l.instance = i.instance AND l.generation = i.generation;
            -- A kick that came while the attempt ran: the run it was folded into.
            IF cardinality(v_kicked) > 0 THEN
                INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status,
                    cursor, component_digest, scheduled_for, rerun_of, next_attempt_at,
                    created_at, updated_at)
                SELECT i.f_id, i.job, i.instance, i.f_tenant, i.f_origin, i.f_payload,
                    'queued', i.f_cursor, i.f_component_digest, i.f_scheduled_for,
                    i.f_rerun_of, v_now + i.f_delay_ms, v_now, v_now
                FROM unnest(v_ended) i
                WHERE i.idx = ANY (v_kicked) AND i.f_id IS NOT NULL;
            END IF;
            INSERT INTO jobhost_reports (kind, job, run_id, code, body, created_at,
                next_try_at)
            SELECT i.r_kind, i.job, i.run_id, i.r_code, i.r_body, v_now, v_now
            FROM unnest(v_ended) i
            WHERE i.r_kind IS NOT NULL;
            v_succeeded := ARRAY(SELECT DISTINCT i.job FROM unnest(v_ended) i
                WHERE i.status = 'succeeded');
        END IF;
        RETURN QUERY
        SELECT i.idx, 'finished',
            CASE WHEN cardinality(v_kicked) > 0 AND i.idx = ANY (v_kicked) THEN i.f_id END
        FROM unnest(v_ended) i;
        v_ending := ARRAY(SELECT i.idx FROM unnest(v_ended) i);
        RETURN QUERY
        SELECT i.idx,
            CASE WHEN i.require_lease AND NOT (i.idx = ANY (v_held)) THEN 'lease_lost'
                 ELSE 'not_running' END,
            CAST(NULL AS TEXT)
        FROM unnest(v_items) i
        WHERE NOT (i.idx = ANY (v_ending));
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
$function$;
REVOKE ALL ON FUNCTION jobhost_record_attempts(jobhost_attempt_item[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobhost_record_attempts(p_items jsonb)
 RETURNS TABLE(idx integer, result text, follow_up text)
 LANGUAGE sql
 SET search_path FROM CURRENT
AS $function$
    SELECT * FROM jobhost_record_attempts(ARRAY(
        SELECT jsonb_populate_record(NULL::jobhost_attempt_item, e.raw)
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(raw, n) ORDER BY e.n))
$function$;
REVOKE ALL ON FUNCTION jobhost_record_attempts(JSONB) FROM PUBLIC;
