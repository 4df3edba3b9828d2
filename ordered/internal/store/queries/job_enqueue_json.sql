-- Enqueues a batch given as a JSON array (see ordered_enqueue in the schema), for callers
-- that go through database/sql. id is 0 for an event at or below its key's archived history.
-- $1 events  jsonb  [{key, seq, kind, payload, run_at, max_attempts}, ...]
SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue($1::jsonb);
