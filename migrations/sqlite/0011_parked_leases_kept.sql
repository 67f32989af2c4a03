-- The Postgres migration of this number keeps a parked lease with its queued run past its
-- hold, in its claim function. SQLite's claim runs in the host's writer, with the
-- statements of `store::queries` (`acquire_lease`, `set_pending`), which have the same
-- condition: nothing changes here.
SELECT 1;
