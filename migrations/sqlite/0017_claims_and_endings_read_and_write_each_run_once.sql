-- The Postgres migration of this number rewrites its claim and ending functions (each run
-- read and written once) and keeps only queued and running runs in the index by status
-- and due time. SQLite's claims and endings are the host's statements
-- (`store::sqlite_writer`), not these functions, and SQLite changes only the index entries
-- of the columns an update names, so a finished run costs that index no new entry; and
-- its planner uses a partial index only for a query naming the index's own condition,
-- which `status = 'queued'` does not for `status IN ('queued', 'running')`: nothing
-- changes here.
SELECT 1;
