-- Components compiled before their first run (issue 42; docs/internals/serving.md). The
-- Postgres migration of the same number has the same column.

-- The component digest a serving host is compiling for the job, set when it registers
-- the job before its compile ends and cleared when the compile ends: the job's queued
-- runs wait meanwhile (no host claims them before it can run them), and people see why
-- (`compiling`). NULL: nothing is being compiled for it.
ALTER TABLE jobhost_jobs ADD COLUMN compiling_digest TEXT;
