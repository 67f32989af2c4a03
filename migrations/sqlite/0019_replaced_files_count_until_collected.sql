-- An object no name points at any more still takes its bytes on the storage until the
-- collector deletes it, so it still counts against its tenant's quota until then: a
-- garbage row carries the tenant and size it counts, and triggers on the garbage table
-- add it to `jobhost_file_usage` as it enters and take it out as the collector forgets
-- it. With the triggers of 0015 on `jobhost_files`, the usage is the objects and bytes
-- the tenant's names point at plus those awaiting collection; an attach checks it with
-- nothing taken off for the object it replaces (`store::queries`, FILE_WITHIN_QUOTA).
-- Garbage from before this migration has no size and stays uncounted, as it was. The
-- Postgres migration of the same number does the same.

ALTER TABLE jobhost_file_garbage ADD COLUMN tenant TEXT;
ALTER TABLE jobhost_file_garbage ADD COLUMN size BIGINT;

DROP TRIGGER jobhost_files_repointed;
CREATE TRIGGER jobhost_files_repointed AFTER UPDATE OF object_key ON jobhost_files
WHEN OLD.object_key <> NEW.object_key
BEGIN
    INSERT OR IGNORE INTO jobhost_file_garbage (object_key, collection, since, tenant, size)
    VALUES (OLD.object_key, OLD.collection, CAST(unixepoch('subsec') * 1000 AS BIGINT),
        OLD.tenant, OLD.size);
    DELETE FROM jobhost_uploads WHERE object_key = NEW.object_key;
END;

DROP TRIGGER jobhost_files_removed;
CREATE TRIGGER jobhost_files_removed AFTER DELETE ON jobhost_files
BEGIN
    INSERT OR IGNORE INTO jobhost_file_garbage (object_key, collection, since, tenant, size)
    VALUES (OLD.object_key, OLD.collection, CAST(unixepoch('subsec') * 1000 AS BIGINT),
        OLD.tenant, OLD.size);
END;

CREATE TRIGGER jobhost_file_garbage_counted AFTER INSERT ON jobhost_file_garbage
WHEN NEW.size IS NOT NULL
BEGIN
    INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
    VALUES (NEW.tenant, NEW.collection, 1, NEW.size)
    ON CONFLICT (tenant, collection) DO UPDATE SET objects = objects + 1,
        bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER jobhost_file_garbage_collected AFTER DELETE ON jobhost_file_garbage
WHEN OLD.size IS NOT NULL
BEGIN
    UPDATE jobhost_file_usage SET objects = objects - 1, bytes = bytes - OLD.size
    WHERE tenant = OLD.tenant AND collection = OLD.collection;
END;
