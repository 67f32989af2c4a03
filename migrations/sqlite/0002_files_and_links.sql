-- Files: names point at immutable objects (see host/src/files). The Postgres migration of
-- the same number has the same tables and columns.

CREATE TABLE jobhost_files (
    tenant     TEXT NOT NULL,
    collection TEXT NOT NULL,
    name       TEXT NOT NULL,
    object_key TEXT NOT NULL UNIQUE,
    size       BIGINT NOT NULL,
    digest     TEXT NOT NULL,
    status     TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, collection, name)
);
CREATE INDEX jobhost_files_status ON jobhost_files (collection, status, created_at);

-- Uploads not attached yet, recorded before their first byte is written.
CREATE TABLE jobhost_uploads (
    object_key TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    collection TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    attach_by  BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX jobhost_uploads_due ON jobhost_uploads (attach_by);

-- Objects no name points at any more, kept for readers still reading them.
CREATE TABLE jobhost_file_garbage (
    object_key TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    since      BIGINT NOT NULL
);
CREATE INDEX jobhost_file_garbage_due ON jobhost_file_garbage (since);

-- The keys that sign per-attempt tokens for links (published as JWKS).
CREATE TABLE jobhost_signing_keys (
    kid        TEXT PRIMARY KEY,
    seed       TEXT NOT NULL,
    public_key TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
