-- Jobs that start jobs (issue 29): a run's parent, what it hands back, and a parent's
-- wait for its children.
--
-- `parent_run`, `parent_attempt` and `parent_pass` name the attempt whose `jobs` call
-- queued the run; `detached` children are neither waited for nor cancelled with their
-- parent. `result` is the JSON value a run hands its parent (`run.set-result`). `event`
-- names the event that queued a run of origin `event`.
--
-- A parent that called `jobs.wait-for-children` records the pass it waits in
-- (`wait_pass`) and its policy; once that pass ended (`wait_pass` < `pass`) it sleeps,
-- queued with its lease parked and due at no time, until the family sweep
-- (`crate::family`) wakes it or fails it. `family` = 1 marks a run whose children the
-- sweep looks after: from its first attached child or wait until it ended and none of
-- its children is left unfinished.
ALTER TABLE jobhost_runs ADD COLUMN parent_run TEXT;
ALTER TABLE jobhost_runs ADD COLUMN parent_attempt BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN parent_pass BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN detached BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobhost_runs ADD COLUMN result TEXT;
ALTER TABLE jobhost_runs ADD COLUMN event TEXT;
ALTER TABLE jobhost_runs ADD COLUMN wait_pass BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN wait_policy TEXT;
ALTER TABLE jobhost_runs ADD COLUMN family BIGINT NOT NULL DEFAULT 0;

CREATE INDEX jobhost_runs_parent ON jobhost_runs (parent_run, parent_pass, id)
    WHERE parent_run IS NOT NULL;
CREATE INDEX jobhost_runs_family ON jobhost_runs (id) WHERE family = 1;

-- Queues the runs `p_runs` (a JSON array) started by the attempt of run `p_parent` at
-- generation `p_generation` running pass `p_pass`, inside the calling transaction (the
-- guest's, fenced as it commits, or the host's own, fenced first). A run whose id exists
-- already is left alone (a dedup key, or the same enqueue by an earlier attempt of the
-- pass). Returns the ids it inserted; NULL when the parent no longer runs that pass. A
-- job's role may execute it; guest SQL can never name it (see store::pg_statement).
CREATE FUNCTION jobhost_enqueue_runs(p_parent TEXT, p_generation BIGINT, p_pass BIGINT,
    p_runs JSONB)
RETURNS TEXT[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
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
$$;
REVOKE ALL ON FUNCTION jobhost_enqueue_runs(TEXT, BIGINT, BIGINT, JSONB) FROM PUBLIC;
