-- The operator's tables for the examples (applied by `host migrate` or at start).
CREATE TABLE ledger (
    run_id  TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    n       BIGINT NOT NULL
);

CREATE TABLE secrets (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO secrets (name, value) VALUES ('api-key', 'do-not-leak');
