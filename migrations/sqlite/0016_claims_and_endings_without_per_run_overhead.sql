-- The Postgres migration of this number rewrites its claim and ending functions (leases
-- found by key, each claimed run read once, endings read as a binary array of items),
-- replaces two row triggers with a statement trigger, and leaves room on the lease
-- table's pages. SQLite's claims and endings run in the host's writer (`store::
-- sqlite_writer`), statement by statement with no wire format, its row triggers run
-- inside the engine without a procedural call per row, and it has no fillfactor:
-- nothing changes here.
SELECT 1;
