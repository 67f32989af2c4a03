-- A guest's `jobs` calls (enqueue, start, kick, emit; `store::family`): queues the runs
-- `p_runs` (a JSON array) started by the attempt of run `p_parent` at generation
-- `p_generation` running pass `p_pass`, inside the calling transaction (the guest's,
-- fenced as it commits, or the host's own, fenced first). Each run goes through
-- `jobhost_enqueue_run`, the one rule of every start: a run whose id exists already
-- (made by an earlier attempt of the pass) is joined; a unique key (a start's `unique`,
-- an earlier guest's `dedup-key`) joins, replaces or debounces the run that holds it;
-- a new run is under its job's `max_per_tenant` as an API start is. Runs with keys are
-- taken in key order, so two batches over the same keys wait rather than deadlock.
--
-- Answers `[outcome, run_id, dropped]` per run, in the order given; NULL when the parent
-- no longer runs that pass (nothing queued). A job's role may execute it (the definer's
-- rights reach `jobhost_enqueue_run`); guest SQL can never name it
-- (store::pg_statement).
--
-- It replaces `jobhost_enqueue_runs` (until WIT 0.1.7), which answered only the ids it
-- inserted.
DROP FUNCTION IF EXISTS jobhost_enqueue_runs(TEXT, BIGINT, BIGINT, JSONB);
CREATE OR REPLACE FUNCTION jobhost_start_runs(p_parent text, p_generation bigint, p_pass bigint, p_runs jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_answers jsonb := '{}'::jsonb;
    v_item RECORD;
    v_answer RECORD;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobhost_runs WHERE id = p_parent AND status = 'running'
                   AND generation = p_generation AND pass = p_pass) THEN
        RETURN NULL;
    END IF;
    FOR v_item IN
        SELECT r.value AS run, r.ordinality AS place
        FROM jsonb_array_elements(p_runs) WITH ORDINALITY AS r
        ORDER BY r.value -> 'unique' ->> 'key' NULLS LAST, r.value ->> 'job', r.ordinality
    LOOP
        SELECT * INTO v_answer FROM jobhost_enqueue_run(
            v_item.run || jsonb_build_object('parent_run', p_parent, 'parent_pass', p_pass),
            NULLIF(v_item.run -> 'unique', 'null'::jsonb));
        v_answers := v_answers || jsonb_build_object(v_item.place::text,
            jsonb_build_array(v_answer.outcome, v_answer.run_id, v_answer.dropped));
    END LOOP;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_runs) AS r
               WHERE COALESCE(CAST(r.value ->> 'detached' AS BIGINT), 0) = 0) THEN
        UPDATE jobhost_runs SET family = 1 WHERE id = p_parent AND family = 0;
    END IF;
    RETURN (SELECT COALESCE(jsonb_agg(v_answers -> CAST(n AS text) ORDER BY n), '[]'::jsonb)
            FROM generate_series(1, jsonb_array_length(p_runs)) AS n);
END
$function$;
REVOKE ALL ON FUNCTION jobhost_start_runs(TEXT, BIGINT, BIGINT, JSONB) FROM PUBLIC;
