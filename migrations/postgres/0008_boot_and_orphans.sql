-- A job's version a boot run was queued for, and jobs no serving host names any more (see
-- docs/architecture.md, "Boot runs and orphaned jobs"). The SQLite migration of the same
-- number has the same columns.

-- The component digest of the last version that queued its `run_on_boot` run: set in the
-- transaction that queues it, so each version queues one, fleet-wide, however many hosts
-- start it and whatever retention later deletes.
ALTER TABLE jobhost_jobs ADD COLUMN boot_digest TEXT;

-- When a host started serving with a manifest that does not name the job; cleared when a
-- host registers it again. An orphaned job is not scheduled or kicked, and retention
-- deletes it once its history is gone.
ALTER TABLE jobhost_jobs ADD COLUMN orphaned_at BIGINT;
