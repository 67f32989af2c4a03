-- The `import` example: a paged source, and the destination it is copied into (each row
-- once: the primary key refuses a second copy). Fill the source with, say:
--   INSERT INTO import_source (id, value)
--   WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
--   SELECT i, 'item-' || i FROM n;
CREATE TABLE import_source (
    id    BIGINT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE import_items (
    id    BIGINT PRIMARY KEY,
    value TEXT NOT NULL,
    pass  BIGINT NOT NULL
);
