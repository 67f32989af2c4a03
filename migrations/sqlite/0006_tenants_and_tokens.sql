-- Tenants and the HTTP API's bearer tokens (see docs/security.md, "The HTTP API"). The
-- migration of the same number on the other backend has the same tables and columns.

-- The registry of tenants. A job's tenant is registered when the job is; a tenant that is
-- disabled gets no new runs (kicks and starts are refused, schedules skip their fires) and
-- its tokens stop working.
CREATE TABLE jobhost_tenants (
    name       TEXT PRIMARY KEY,
    active     BIGINT NOT NULL DEFAULT 1,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- 1 for a job whose fires and kicks queue one child run per active tenant.
ALTER TABLE jobhost_jobs ADD COLUMN per_tenant BIGINT NOT NULL DEFAULT 0;

-- A token is `jh_<id>_<secret>`; only the SHA-256 of the secret is kept. A token without a
-- tenant is an operator's.
CREATE TABLE jobhost_tokens (
    id          TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    tenant      TEXT,
    label       TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- Tenants see their own runs: listing them by tenant, newest first.
CREATE INDEX jobhost_runs_tenant ON jobhost_runs (tenant, created_at);
