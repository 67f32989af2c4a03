-- Files: names point at immutable objects (see host/src/files). The SQLite migration of
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

-- The row changes of `files`, one function each. The host calls them in its own fenced
-- transactions and, through the job's role, inside a guest's transaction (whose commit
-- checks the fence); guest SQL can never call them (see host/src/store/pg_statement.rs).
-- Each returns what it changed. On SQLite the same statements run from
-- host/src/store/files.rs.
CREATE FUNCTION jobhost_attach_file(
    p_tenant TEXT, p_collection TEXT, p_name TEXT, p_key TEXT, p_size BIGINT,
    p_digest TEXT, p_status TEXT, p_run TEXT
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old TEXT;
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
BEGIN
    SELECT object_key INTO v_old FROM jobhost_files
    WHERE tenant = p_tenant AND collection = p_collection AND name = p_name FOR UPDATE;
    INSERT INTO jobhost_files (tenant, collection, name, object_key, size, digest, status,
        run_id, created_at)
    VALUES (p_tenant, p_collection, p_name, p_key, p_size, p_digest, p_status, p_run, v_now)
    ON CONFLICT (tenant, collection, name) DO UPDATE SET object_key = excluded.object_key,
        size = excluded.size, digest = excluded.digest, status = excluded.status,
        run_id = excluded.run_id, created_at = excluded.created_at;
    IF v_old IS NOT NULL AND v_old <> p_key THEN
        INSERT INTO jobhost_file_garbage (object_key, collection, since)
        VALUES (v_old, p_collection, v_now) ON CONFLICT DO NOTHING;
    END IF;
    DELETE FROM jobhost_uploads WHERE object_key = p_key;
    RETURN v_now;
END
$$;
REVOKE ALL ON FUNCTION jobhost_attach_file(TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT) FROM PUBLIC;

CREATE FUNCTION jobhost_remove_file(p_tenant TEXT, p_collection TEXT, p_name TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old TEXT;
BEGIN
    DELETE FROM jobhost_files
    WHERE tenant = p_tenant AND collection = p_collection AND name = p_name
    RETURNING object_key INTO v_old;
    IF v_old IS NULL THEN
        RETURN FALSE;
    END IF;
    INSERT INTO jobhost_file_garbage (object_key, collection, since)
    VALUES (v_old, p_collection, CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))
    ON CONFLICT DO NOTHING;
    RETURN TRUE;
END
$$;
REVOKE ALL ON FUNCTION jobhost_remove_file(TEXT, TEXT, TEXT) FROM PUBLIC;

CREATE FUNCTION jobhost_mark_file(p_collection TEXT, p_key TEXT, p_status TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE jobhost_files SET status = p_status
    WHERE collection = p_collection AND object_key = p_key AND status = 'pending';
    RETURN FOUND;
END
$$;
REVOKE ALL ON FUNCTION jobhost_mark_file(TEXT, TEXT, TEXT) FROM PUBLIC;
