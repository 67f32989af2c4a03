-- An object no name points at any more still takes its bytes on the storage until the
-- collector deletes it, so it still counts against its tenant's quota until then: a
-- garbage row carries the tenant and size it counts, and a trigger on the garbage table
-- adds it to `jobhost_file_usage` as it enters and takes it out as the collector forgets
-- it. With the bookkeeping of 0015 on `jobhost_files`, the usage is the objects and bytes
-- the tenant's names point at plus those awaiting collection; `jobhost_attach_file`
-- checks it with nothing taken off for the object it replaces. Garbage from before this
-- migration has no size and stays uncounted, as it was. The SQLite migration of the
-- same number does the same.

ALTER TABLE jobhost_file_garbage ADD COLUMN tenant TEXT;
ALTER TABLE jobhost_file_garbage ADD COLUMN size BIGINT;

CREATE OR REPLACE FUNCTION jobhost_files_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.object_key <> NEW.object_key) THEN
        INSERT INTO jobhost_file_garbage (object_key, collection, since, tenant, size)
        VALUES (OLD.object_key, OLD.collection,
                CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT),
                OLD.tenant, OLD.size)
        ON CONFLICT DO NOTHING;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        DELETE FROM jobhost_uploads WHERE object_key = NEW.object_key;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
        VALUES (NEW.tenant, NEW.collection, 1, NEW.size)
        ON CONFLICT (tenant, collection) DO UPDATE
        SET objects = jobhost_file_usage.objects + 1,
            bytes = jobhost_file_usage.bytes + excluded.bytes;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE jobhost_file_usage SET bytes = bytes - OLD.size + NEW.size
        WHERE tenant = NEW.tenant AND collection = NEW.collection;
    ELSE
        UPDATE jobhost_file_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE tenant = OLD.tenant AND collection = OLD.collection;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION jobhost_file_garbage_usage() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
        VALUES (NEW.tenant, NEW.collection, 1, NEW.size)
        ON CONFLICT (tenant, collection) DO UPDATE
        SET objects = jobhost_file_usage.objects + 1,
            bytes = jobhost_file_usage.bytes + excluded.bytes;
    ELSE
        UPDATE jobhost_file_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE tenant = OLD.tenant AND collection = OLD.collection;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_file_garbage_usage() FROM PUBLIC;

CREATE TRIGGER jobhost_file_garbage_counted AFTER INSERT ON jobhost_file_garbage
FOR EACH ROW WHEN (NEW.size IS NOT NULL) EXECUTE FUNCTION jobhost_file_garbage_usage();
CREATE TRIGGER jobhost_file_garbage_collected AFTER DELETE ON jobhost_file_garbage
FOR EACH ROW WHEN (OLD.size IS NOT NULL) EXECUTE FUNCTION jobhost_file_garbage_usage();

-- An attach within the tenant's quota: NULL (and nothing changed) if the tenant's usage in
-- the collection, with this file added, would pass `p_max_objects` objects or
-- `p_max_bytes` bytes. The object the name points at now is not taken off: replaced, it
-- still counts until the collector deletes it. The usage row is locked first, as in 0015.
CREATE OR REPLACE FUNCTION jobhost_attach_file(
    p_tenant TEXT, p_collection TEXT, p_name TEXT, p_key TEXT, p_size BIGINT,
    p_digest TEXT, p_status TEXT, p_run TEXT, p_max_objects BIGINT, p_max_bytes BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_objects BIGINT;
    v_bytes BIGINT;
BEGIN
    INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
    VALUES (p_tenant, p_collection, 0, 0) ON CONFLICT DO NOTHING;
    SELECT objects, bytes INTO v_objects, v_bytes FROM jobhost_file_usage
    WHERE tenant = p_tenant AND collection = p_collection FOR UPDATE;
    IF v_objects + 1 > p_max_objects OR v_bytes + p_size > p_max_bytes THEN
        RETURN NULL;
    END IF;
    INSERT INTO jobhost_files (tenant, collection, name, object_key, size, digest, status,
        run_id, created_at)
    VALUES (p_tenant, p_collection, p_name, p_key, p_size, p_digest, p_status, p_run, v_now)
    ON CONFLICT (tenant, collection, name) DO UPDATE SET object_key = excluded.object_key,
        size = excluded.size, digest = excluded.digest, status = excluded.status,
        run_id = excluded.run_id, created_at = excluded.created_at;
    RETURN v_now;
END
$$;
