-- Claims fair across tenants, `max_per_tenant` and quotas (see docs/architecture.md, "Flow
-- control"). The Postgres migration of the same number has the same columns and indexes.

-- A job's cap on its queued and running runs per tenant, and what a run over it does:
-- `skip` (it is recorded `skipped` with code `tenant_limit` and reported) or `defer` (it
-- waits for a slot). Set by the job's registration, so every host's queueing sees it.
ALTER TABLE jobhost_jobs ADD COLUMN max_per_tenant BIGINT;
ALTER TABLE jobhost_jobs ADD COLUMN over_limit TEXT;

-- 1 while a run of a job with `over_limit = 'defer'` waits for a slot: it is queued but
-- holds none, and a claim starts it only once fewer than `max_per_tenant` runs hold one.
ALTER TABLE jobhost_runs ADD COLUMN waiting BIGINT NOT NULL DEFAULT 0;
-- How many times a claim found no slot for it: its next wait grows with this, and no
-- attempt is used.
ALTER TABLE jobhost_runs ADD COLUMN slot_waits BIGINT NOT NULL DEFAULT 0;

-- The queued runs of each tenant in claim order: a claim walks the tenants with queued
-- runs through this index and takes a share of each one's due runs.
CREATE INDEX jobhost_runs_queued_by_tenant ON jobhost_runs (tenant, next_attempt_at, id)
    WHERE status = 'queued';

-- The attempts of the last hour, whose fuel and time count against their tenant's quota.
CREATE INDEX jobhost_attempts_finished ON jobhost_attempts (finished_at);
