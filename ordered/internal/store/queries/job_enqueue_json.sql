-- Enqueues a batch given as a JSON array (see ordered_enqueue in the schema), for callers
-- that go through database/sql. id is 0 for an event at or below its key's archived history.
-- The payload limit is not passed, as in job_enqueue_many.sql.
-- $1 events         jsonb    [{key, seq, kind, payload, run_at, max_attempts}, ...]
-- $2 max_key_bytes  integer  the limit of keys and kinds
-- $3 attempts       integer  the attempt limit of an event that sets none
SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue($1::jsonb, $2::integer, NULL, $3::integer);
