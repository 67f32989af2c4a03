-- A run keeps its last 1 000 attempts: recording a later one deletes those before it. A
-- run that continues pass after pass has one attempt per pass, each with up to 64 KiB of
-- log, and no bound on its passes; this bounds what one run can make the database hold,
-- and what retention deletes in one go once it ends. The Postgres migration of the same
-- number has the same trigger.
CREATE TRIGGER jobhost_attempts_kept AFTER INSERT ON jobhost_attempts
WHEN NEW.seq > 1000
BEGIN
    DELETE FROM jobhost_attempts WHERE run_id = NEW.run_id AND seq <= NEW.seq - 1000;
END;
