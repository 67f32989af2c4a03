-- The Postgres migration of this number takes a claim's leases and starts its runs in
-- statements that find each run's lease by its key, and replaces two row triggers with a
-- statement trigger. SQLite's claim (`store::sqlite_writer`) already starts each run by
-- its key, and its row triggers run inside the engine, without a procedural call per row:
-- nothing changes here.
SELECT 1;
