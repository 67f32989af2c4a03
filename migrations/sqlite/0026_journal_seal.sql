-- The key that seals journals (issue 38). The Postgres migration of the same number has the
-- same columns.

-- Secrets the installation keeps for itself, by name. `journal-seal`: the key of the
-- HMAC-SHA256 each kept journal carries (`journal::file`), written by the first host that
-- keeps one; `host replay` checks a journal against it. Never shown, never exported.
CREATE TABLE jobhost_secrets (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
