-- A run keeps its last 1 000 attempts: recording a later one deletes those before it. A
-- run that continues pass after pass has one attempt per pass, each with up to 64 KiB of
-- log, and no bound on its passes; this bounds what one run can make the database hold,
-- and what retention deletes in one go once it ends. The SQLite migration of the same
-- number has the same trigger.
CREATE FUNCTION jobhost_attempts_kept() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM jobhost_attempts a WHERE a.run_id = NEW.run_id AND a.seq <= NEW.seq - 1000;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_attempts_kept() FROM PUBLIC;

CREATE TRIGGER jobhost_attempts_kept AFTER INSERT ON jobhost_attempts
FOR EACH ROW WHEN (NEW.seq > 1000)
EXECUTE FUNCTION jobhost_attempts_kept();
