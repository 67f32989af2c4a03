-- A replaced or removed file's object counts in its tenant's usage until the collector
-- deletes it: garbage rows with a size add to the usage when written, and take off when
-- collected.
CREATE OR REPLACE FUNCTION jobhost_file_garbage_usage()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION jobhost_file_garbage_usage() FROM PUBLIC;
