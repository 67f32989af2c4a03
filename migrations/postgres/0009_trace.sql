-- A run's W3C trace context (see docs/architecture.md, "Trace propagation"). The SQLite
-- migration of the same number has the same column.

-- The `traceparent` the run was queued with (a caller's, validated, or one the host
-- started): its trace id is the run's, its parent id the caller's span. NULL for a run
-- queued without one (a follow-up of kicks, a row from before this migration), whose trace
-- id the host derives from the run's id.
ALTER TABLE jobhost_runs ADD COLUMN trace_parent TEXT;
