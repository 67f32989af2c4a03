-- A name's bookkeeping, done in the statement that changes the name: the key it stops
-- pointing at becomes garbage (for the collector, once readers are done with it), and an
-- attached upload stops being an upload. One statement per file write instead of four
-- round trips; on Postgres the functions of migration 0002 do the same.

CREATE TRIGGER jobhost_files_attached AFTER INSERT ON jobhost_files
BEGIN
    DELETE FROM jobhost_uploads WHERE object_key = NEW.object_key;
END;

CREATE TRIGGER jobhost_files_repointed AFTER UPDATE OF object_key ON jobhost_files
WHEN OLD.object_key <> NEW.object_key
BEGIN
    INSERT OR IGNORE INTO jobhost_file_garbage (object_key, collection, since)
    VALUES (OLD.object_key, OLD.collection, CAST(unixepoch('subsec') * 1000 AS BIGINT));
    DELETE FROM jobhost_uploads WHERE object_key = NEW.object_key;
END;

CREATE TRIGGER jobhost_files_removed AFTER DELETE ON jobhost_files
BEGIN
    INSERT OR IGNORE INTO jobhost_file_garbage (object_key, collection, since)
    VALUES (OLD.object_key, OLD.collection, CAST(unixepoch('subsec') * 1000 AS BIGINT));
END;
