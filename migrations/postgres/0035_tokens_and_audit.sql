-- Read-only and expiring tokens, and the audit log (issue 44). The migration of the same
-- number on the other backend has the same tables and columns.

-- A read-only token sees what an operator's sees and changes nothing; a token past
-- `expires_at` (database time, ms) is refused. Both are fixed when the token is created.
ALTER TABLE jobhost_tokens ADD COLUMN read_only BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobhost_tokens ADD COLUMN expires_at BIGINT;

-- One row per change asked through the API, the console or the CLI, with its result: who
-- (`actor` 'token' with the token's id and label, or 'cli' with the OS user as the label;
-- `tenant`, the acting token's tenant), the fixed action name, the object it names, the
-- run it started or acted on, and `ok` or the fixed error code. Retention deletes rows
-- as old as the runs it deletes.
CREATE TABLE jobhost_audit (
    id       BIGSERIAL PRIMARY KEY,
    at       BIGINT NOT NULL,
    actor    TEXT NOT NULL,
    token_id TEXT,
    label    TEXT NOT NULL,
    tenant   TEXT,
    action   TEXT NOT NULL,
    object   TEXT NOT NULL,
    run_id   TEXT,
    result   TEXT NOT NULL
);
-- The log newest first, and a tenant's own; a run's actions.
CREATE INDEX jobhost_audit_at ON jobhost_audit (at, id);
CREATE INDEX jobhost_audit_tenant ON jobhost_audit (tenant, at, id);
CREATE INDEX jobhost_audit_run ON jobhost_audit (run_id);
