-- Wakes every host listening on `jobhost_work` when a run is queued; the payload names
-- its tenant, so each host serves that tenant's backlog in turn at once.
CREATE OR REPLACE FUNCTION jobhost_notify_work()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('jobhost_work', COALESCE(NEW.tenant, ''));
    RETURN NULL;
END
$function$;
