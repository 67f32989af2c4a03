-- The Postgres migration of this number starts claimed runs and records the ends of
-- attempts in a handful of statements per batch instead of per run. The SQLite host runs
-- a batch's statements in its writer's one transaction (`store::sqlite_writer`), where a
-- statement costs microseconds and is prepared once: nothing changes here.
SELECT 1;
