-- An application's enqueue in its own transaction (issue 41, migration 0037):
-- `jobhost.enqueue(job, payload, options)` queues a run of `job` — or joins, replaces or
-- debounces the one its unique key names — and answers the run's id (text: a UUID v7,
-- as every run id). It commits or rolls back with the caller's transaction; hosts are
-- woken by the row trigger of a queued run (`jobhost_notify_work`), whose notification
-- Postgres delivers on commit only.
--
-- It checks what the API checks, with the API's words after `jobhost: `, raised with
-- SQLSTATE `JH400` (bad input), `JH404` (no such job or tenant) or `JH409` (the job takes
-- no runs now), before anything is written; what follows the checks is
-- `jobhost_enqueue_run`, the rule the API's Postgres enqueue runs too. The queue caps
-- (`max_queued`, `queue::backlog`) are read from the job's stored definition as the host
-- reads them, and counted as the host counts them: just before the write, under no lock.
--
-- `SECURITY DEFINER`, owned by the host's role, so an application role needs only
-- `host apps grant` (usage of schema `jobhost` and execute of this function), no table.
-- Its search path is the host's schema then `pg_temp` (set below), and a session whose
-- temporary tables could stand in for the host's (named `jobhost...`) is refused.

-- Whether `p_text` is a name of at most `p_max` bytes that shows as written
-- (`rules::name_rule`): refused are controls, formatting characters (bidirectional,
-- zero-width and invisible ones), line and paragraph separators and private-use
-- characters. Unlike the Rust rule, code points unassigned in Unicode pass.
CREATE OR REPLACE FUNCTION jobhost_shown_name(p_text text, p_max integer)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
SELECT p_text IS NOT NULL AND p_text <> '' AND octet_length(p_text) <= p_max
    AND p_text !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ue000-\uf8ff\U000e0000-\U000e007f\U000f0000-\U0010ffff]'
$function$;
REVOKE ALL ON FUNCTION jobhost_shown_name(TEXT, INTEGER) FROM PUBLIC;

-- Milliseconds of a duration as `rules::units::parse_duration` reads it (`30s`, `10m`,
-- `2h`, `1d`, `250ms`), or NULL.
CREATE OR REPLACE FUNCTION jobhost_duration_ms(p_text text)
 RETURNS numeric
 LANGUAGE sql
 IMMUTABLE
AS $function$
SELECT CAST(m[1] AS numeric) * CASE m[2] WHEN 'ms' THEN 1 WHEN 's' THEN 1000
    WHEN 'm' THEN 60000 WHEN 'h' THEN 3600000 ELSE 86400000 END
FROM regexp_match(p_text, '^\s*([0-9]+)\s*(ms|s|m|h|d)\s*$') AS m
$function$;
REVOKE ALL ON FUNCTION jobhost_duration_ms(TEXT) FROM PUBLIC;

-- How deeply `p` nests arrays and objects (a scalar: 0), counted no further than 33.
CREATE OR REPLACE FUNCTION jobhost_json_depth(p jsonb)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
WITH RECURSIVE walk(v, d) AS (
    SELECT p, CASE WHEN jsonb_typeof(p) IN ('object', 'array') THEN 1 ELSE 0 END
    UNION ALL
    SELECT c.v, w.d + 1 FROM walk w
    CROSS JOIN LATERAL (
        SELECT e.value AS v FROM jsonb_each(CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e
        UNION ALL
        SELECT a.value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) a
    ) c
    WHERE jsonb_typeof(c.v) IN ('object', 'array') AND w.d <= 32
)
SELECT MAX(d) FROM walk
$function$;
REVOKE ALL ON FUNCTION jobhost_json_depth(JSONB) FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobhost.enqueue(job text, payload jsonb, options jsonb DEFAULT '{}')
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_name TEXT := $1;
    v_options JSONB := COALESCE($3, '{}');
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_job RECORD;
    v_field TEXT;
    v_instance TEXT := 'default';
    v_tenant TEXT;
    v_active BIGINT;
    v_payload TEXT;
    v_due NUMERIC := 0;
    v_priority NUMERIC := 0;
    v_unique JSONB;
    v_rule JSONB;
    v_while TEXT := 'until-finished';
    v_period NUMERIC;
    v_conflict TEXT := 'keep';
    v_attempts NUMERIC;
    v_flow JSONB;
    v_cap NUMERIC;
    v_answer RECORD;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()
                 AND c.relname LIKE 'jobhost%') THEN
        RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: this session has '
            'temporary tables named jobhost...: drop them, or enqueue from another session';
    END IF;
    SELECT j.name, j.tenant, j.spec, j.per_tenant, j.orphaned_at INTO v_job
    FROM jobhost_jobs j WHERE j.name = v_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'JH404',
            MESSAGE = format('jobhost: no job named "%s"', left(v_name, 200));
    END IF;
    IF jsonb_typeof(v_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: options: a JSON object '
            'of instance, tenant, run_at or delay, priority, max_attempts and unique';
    END IF;
    FOR v_field IN SELECT jsonb_object_keys(v_options) LOOP
        IF v_field <> ALL (ARRAY['instance', 'tenant', 'run_at', 'delay', 'priority',
                'max_attempts', 'unique'])
        THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = format('jobhost: %s: not an '
                'option of jobhost.enqueue (instance, tenant, run_at, delay, priority, '
                'max_attempts, unique)',
                left(v_field, 200));
        END IF;
    END LOOP;

    -- When: `run_at` or `delay` (`rules::enqueue::from_json`), then the priority.
    IF v_options ? 'run_at' AND v_options ? 'delay' THEN
        RAISE EXCEPTION USING ERRCODE = 'JH400',
            MESSAGE = 'jobhost: run_at: give run_at or delay, not both';
    ELSIF v_options ? 'run_at' THEN
        IF jsonb_typeof(v_options -> 'run_at') = 'string' AND v_options ->> 'run_at' ~
            '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$'
        THEN
            BEGIN
                v_due := floor(EXTRACT(EPOCH FROM CAST(v_options ->> 'run_at' AS timestamptz))
                    * 1000) - v_now;
            EXCEPTION WHEN others THEN
                v_due := NULL;
            END;
        ELSE
            v_due := NULL;
        END IF;
        IF v_due IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: run_at: an RFC 3339 time, e.g. 2026-12-06T12:00:00Z';
        ELSIF v_due < -86400000 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: run_at: more than a day in the past';
        ELSIF v_due > 31536000000 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: run_at: more than a year ahead';
        END IF;
    ELSIF v_options ? 'delay' THEN
        v_due := CASE WHEN jsonb_typeof(v_options -> 'delay') = 'string'
            THEN jobhost_duration_ms(v_options ->> 'delay') END;
        IF v_due IS NULL OR v_due > 31536000000 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: delay: a duration of at most a year, e.g. 30s, 10m, 2h';
        END IF;
    END IF;
    IF v_options ? 'priority' THEN
        IF jsonb_typeof(v_options -> 'priority') <> 'number'
           OR v_options ->> 'priority' !~ '^-?[0-9]+$'
           OR abs(CAST(v_options ->> 'priority' AS numeric)) > 3600 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: priority: an integer of seconds from -3600 to 3600';
        END IF;
        v_priority := CAST(v_options ->> 'priority' AS numeric);
    END IF;
    -- Fewer attempts than the job's, never more (`Options::within_job`).
    IF v_options ? 'max_attempts' THEN
        IF jsonb_typeof(v_options -> 'max_attempts') = 'number'
           AND v_options ->> 'max_attempts' ~ '^[0-9]{1,10}$' THEN
            v_attempts := CAST(v_options ->> 'max_attempts' AS numeric);
        END IF;
        IF v_attempts IS NULL OR v_attempts < 1 OR v_attempts > 1 + COALESCE(CAST(
                CAST(v_job.spec AS jsonb) -> 'retry' ->> 'retries' AS numeric), 0) THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: max_attempts: an '
                'integer from 1 to the job''s attempts a pass (its retries + 1)';
        END IF;
    END IF;

    IF v_options ? 'unique' THEN
        v_rule := v_options -> 'unique';
        IF jsonb_typeof(v_rule) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: unique: an object with key, while and on_conflict';
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_rule) k
                   WHERE k NOT IN ('key', 'while', 'on_conflict')) THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: unique: only key, while and on_conflict';
        END IF;
        IF jsonb_typeof(v_rule -> 'key') IS DISTINCT FROM 'string'
           OR NOT jobhost_shown_name(v_rule ->> 'key', 200) THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: unique.key: 1-200 '
                'bytes of characters that show as themselves: no controls or invisible marks';
        END IF;
        IF v_rule ? 'while' THEN
            v_while := CASE WHEN jsonb_typeof(v_rule -> 'while') = 'string'
                THEN v_rule ->> 'while' END;
            IF v_while IS NULL OR v_while NOT IN ('queued', 'active', 'until-finished') THEN
                v_period := jobhost_duration_ms(v_while);
                IF v_period IS NULL OR v_period = 0 OR v_period > 31536000000 THEN
                    RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: unique.while: '
                        'queued, active, until-finished, or a period such as 1h';
                END IF;
                v_while := 'period';
            END IF;
        END IF;
        IF v_rule ? 'on_conflict' THEN
            v_conflict := CASE WHEN jsonb_typeof(v_rule -> 'on_conflict') = 'string'
                THEN v_rule ->> 'on_conflict' END;
            IF v_conflict IS NULL OR v_conflict NOT IN ('keep', 'replace', 'debounce') THEN
                RAISE EXCEPTION USING ERRCODE = 'JH400',
                    MESSAGE = 'jobhost: unique.on_conflict: keep, replace or debounce';
            END IF;
        END IF;
        v_unique := jsonb_build_object('key', v_rule ->> 'key', 'while', v_while,
            'period_ms', v_period, 'on_conflict', v_conflict);
    END IF;

    -- Which instance and tenant (`queue::kick`): a plain job's runs are its tenant's; a
    -- per-tenant job's instances are its registered, active tenants.
    IF v_options ? 'instance' THEN
        v_instance := CASE WHEN jsonb_typeof(v_options -> 'instance') = 'string'
            THEN v_options ->> 'instance' END;
        IF NOT COALESCE(jobhost_shown_name(v_instance, 128), false) THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = format('jobhost: invalid '
                'instance key "%s": use 1-128 printable characters', left(v_instance, 200));
        END IF;
    END IF;
    IF v_options ? 'tenant' AND jsonb_typeof(v_options -> 'tenant') IS DISTINCT FROM 'string'
    THEN
        RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: tenant: a string';
    END IF;
    IF v_job.per_tenant = 0 THEN
        v_tenant := COALESCE(v_options ->> 'tenant', v_job.tenant);
        IF v_tenant <> v_job.tenant THEN
            RAISE EXCEPTION USING ERRCODE = 'JH404', MESSAGE = format(
                'jobhost: no job named "%s" of tenant "%s"', v_name, left(v_tenant, 200));
        END IF;
    ELSE
        v_tenant := COALESCE(v_options ->> 'tenant', v_instance);
        IF v_options ? 'instance' AND v_instance <> v_tenant THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = 'jobhost: a tenant kicks and '
                'starts its own child of a per-tenant job: leave out the instance';
        END IF;
        v_instance := v_tenant;
        SELECT t.active INTO v_active FROM jobhost_tenants t WHERE t.name = v_tenant;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'JH404', MESSAGE = format('jobhost: a per-tenant '
                'job''s instances are its tenants: no registered tenant "%s"', left(v_tenant, 200));
        ELSIF v_active = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH409', MESSAGE = format(
                'jobhost: the tenant "%s" is disabled: its jobs take no new runs', v_tenant);
        END IF;
    END IF;
    IF v_job.orphaned_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'JH409', MESSAGE = format('jobhost: the job "%s" is '
            'orphaned: no serving host registered it within the orphan grace', v_name);
    END IF;
    IF EXISTS (SELECT 1 FROM jobhost_tenants t WHERE t.name = v_job.tenant AND t.active = 0)
    THEN
        RAISE EXCEPTION USING ERRCODE = 'JH409', MESSAGE = format(
            'jobhost: the tenant "%s" is disabled: its jobs take no new runs', v_job.tenant);
    END IF;

    -- The payload (`rules::json_rule::PAYLOAD`): the job's own if none is given.
    IF $2 IS NULL THEN
        v_payload := COALESCE(CAST(CAST(v_job.spec AS jsonb) -> 'payload' AS text), '{}');
    ELSE
        v_payload := CAST($2 AS text);
        IF octet_length(v_payload) > 262144 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400', MESSAGE = format(
                'jobhost: payload refused: %s bytes; the limit is 262144', octet_length(v_payload));
        END IF;
        IF jobhost_json_depth($2) > 32 THEN
            RAISE EXCEPTION USING ERRCODE = 'JH400',
                MESSAGE = 'jobhost: payload refused: nested deeper than the limit';
        END IF;
    END IF;

    -- The queue caps (`queue::backlog::room`), from the job's stored definition. A start
    -- that would join its job's live run queues nothing, so it takes no room.
    IF v_unique IS NOT NULL OR NOT EXISTS (SELECT 1 FROM jobhost_runs r
            WHERE r.job = v_name AND r.instance = v_instance
              AND r.status IN ('queued', 'running')) THEN
        v_flow := COALESCE(CAST(v_job.spec AS jsonb) -> 'flow', '{}');
        v_cap := COALESCE(CAST(v_flow -> 'tenant_queued' -> 'tenants' ->> v_tenant AS numeric),
            CAST(v_flow -> 'tenant_queued' ->> 'default' AS numeric), 100000);
        IF (SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs r WHERE r.tenant = v_tenant
                AND r.status = 'queued' LIMIT v_cap) t) + 1 > v_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'JH429', MESSAGE = format('jobhost: tenant "%s" '
                'has %s runs queued, its max_queued: nothing was queued; try again once runs '
                'have left the queue', v_tenant, v_cap);
        END IF;
        v_cap := COALESCE(CAST(v_flow ->> 'max_queued' AS numeric), 20000);
        IF (SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs r WHERE r.job = v_name
                AND r.tenant = v_tenant AND r.status = 'queued' LIMIT v_cap) t) + 1 > v_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'JH429', MESSAGE = format('jobhost: job "%s" has %s '
                'runs queued for tenant "%s", its max_queued: nothing was queued; try again '
                'once runs have left the queue', v_name, v_cap, v_tenant);
        END IF;
    END IF;

    SELECT * INTO v_answer FROM jobhost_enqueue_run(jsonb_build_object(
        -- A UUID v7, as `store::new_run_id` makes: the time in its first 48 bits.
        'id', CAST(CAST(encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send(v_now) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')
            AS uuid) AS text),
        'job', v_name, 'instance', v_instance, 'tenant', v_tenant, 'origin', 'start',
        'payload', v_payload, 'delay_ms', v_due - v_priority * 1000,
        'max_attempts', v_attempts,
        'trace_parent', '00-' || replace(CAST(gen_random_uuid() AS text), '-', '') || '-'
            || left(replace(CAST(gen_random_uuid() AS text), '-', ''), 16) || '-01'),
        v_unique);
    RETURN v_answer.run_id;
END
$function$;
-- Only the host's role and the roles `host apps grant` names may call it; the search
-- path is fixed to the host's schema with `pg_temp` last.
REVOKE ALL ON FUNCTION jobhost.enqueue(TEXT, JSONB, JSONB) FROM PUBLIC;
DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION jobhost.enqueue(TEXT, JSONB, JSONB) SET search_path = %I, pg_temp',
        current_schema());
END
$do$;
