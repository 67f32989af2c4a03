-- A name's bookkeeping, done by a trigger on the row that changes: the key a name stops
-- pointing at becomes garbage (for the collector, once readers are done with it), and an
-- attached upload stops being an upload. The SQLite migrations have the same triggers.
CREATE OR REPLACE FUNCTION jobhost_files_bookkeeping()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION jobhost_files_bookkeeping() FROM PUBLIC;
