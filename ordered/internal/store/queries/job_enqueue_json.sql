-- Enqueues a batch given as a JSON array (see ordered_enqueue in the schema), for callers
-- that go through database/sql.
SELECT ord, id, duplicate FROM ordered_enqueue($1::jsonb);
