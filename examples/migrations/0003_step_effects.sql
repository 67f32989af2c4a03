-- The effects of the `stepper` test guest's steps (tests/guests/stepper): one row per step
-- that ran, so a test sees each committed step exactly once.
CREATE TABLE step_effects (
    run_id TEXT NOT NULL,
    pass   BIGINT NOT NULL,
    name   TEXT NOT NULL
);
