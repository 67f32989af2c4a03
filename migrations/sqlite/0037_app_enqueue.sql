-- An application's enqueue in its own transaction is Postgres' (migration 0037 there):
-- SQLite has no roles, so applications enqueue through the API or `host start`. The
-- number is kept so both backends' migrations stay in step.
SELECT 1;
