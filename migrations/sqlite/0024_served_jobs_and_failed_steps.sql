-- Jobs the fleet serves, and steps that failed (issue 29). The Postgres migration of the
-- same number has the same columns and table.

-- When a serving host last registered the job (see docs/architecture.md, "Boot runs and
-- orphaned jobs"): each serving host sets it for the jobs its manifest names when it
-- starts and every quarter of its orphan grace after. A job no host registered (nor
-- `host run` upserted) within the grace is orphaned; registered again, it is restored.
ALTER TABLE jobhost_jobs ADD COLUMN served_at BIGINT;

-- Per step of a pass, the attempts that reached it and failed without recording it, and
-- the last such attempt's failure (see docs/architecture.md, "Resumable runs"): host-written
-- text only, its fixed failure code and a bounded, terminal-safe message. Kept with the
-- run, not with the pass's ledger, so a step that failed still says so once the pass moved
-- on; retention deletes it with the run.
CREATE TABLE jobhost_step_failures (
    run_id     TEXT NOT NULL,
    pass       BIGINT NOT NULL,
    name       TEXT NOT NULL,
    attempts   BIGINT NOT NULL,
    last_code  TEXT NOT NULL,
    last_error TEXT,
    failed_at  BIGINT NOT NULL,
    PRIMARY KEY (run_id, pass, name)
);
