-- Each tenant's quota in a collection: its usage (objects and bytes its names point at)
-- kept by triggers in the statement that changes a name, so an attach checks one row
-- instead of summing the tenant's files. The Postgres migration of the same number has
-- the same table, and checks the quota in `jobhost_attach_file`; SQLite's statements
-- check it in their own WHERE (`store::queries`, FILE_WITHIN_QUOTA).

CREATE TABLE jobhost_file_usage (
    tenant     TEXT NOT NULL,
    collection TEXT NOT NULL,
    objects    BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    PRIMARY KEY (tenant, collection)
);

INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
SELECT tenant, collection, COUNT(*), SUM(size) FROM jobhost_files GROUP BY tenant, collection;

CREATE TRIGGER jobhost_files_usage_added AFTER INSERT ON jobhost_files
BEGIN
    INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
    VALUES (NEW.tenant, NEW.collection, 1, NEW.size)
    ON CONFLICT (tenant, collection) DO UPDATE SET objects = objects + 1,
        bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER jobhost_files_usage_replaced AFTER UPDATE OF object_key, size ON jobhost_files
BEGIN
    UPDATE jobhost_file_usage SET bytes = bytes - OLD.size + NEW.size
    WHERE tenant = NEW.tenant AND collection = NEW.collection;
END;

CREATE TRIGGER jobhost_files_usage_removed AFTER DELETE ON jobhost_files
BEGIN
    UPDATE jobhost_file_usage SET objects = objects - 1, bytes = bytes - OLD.size
    WHERE tenant = OLD.tenant AND collection = OLD.collection;
END;

-- The Postgres migration of this number also makes `jobhost_record_step` check the run;
-- on SQLite the host's own statement records a step (guests call no functions).
