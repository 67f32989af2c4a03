-- Jobs the fleet serves, and steps that failed (issue 29). The SQLite migration of the
-- same number has the same columns and table.

-- When a serving host last registered the job (see docs/architecture.md, "Boot runs and
-- orphaned jobs"): each serving host sets it for the jobs its manifest names when it
-- starts and every quarter of its orphan grace after. A job no host registered (nor
-- `host run` upserted) within the grace is orphaned; registered again, it is restored.
ALTER TABLE jobhost_jobs ADD COLUMN served_at BIGINT;