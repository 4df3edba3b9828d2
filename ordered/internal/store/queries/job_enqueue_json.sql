-- Enqueues a batch given as a JSON array (see ordered_enqueue in the schema), for callers
-- that go through database/sql. id is 0 for an event at or below its key's archived history.
-- The payload limit is not passed, as in job_enqueue_many.sql.
-- $1 events         jsonb    [{key, seq, kind, payload, run_at, max_attempts}, ...]
-- $2 max_key_bytes  integer  the limit of keys and kinds
-- $3 attempts       integer  the attempt limit of an event that sets none
-- $4 first_seq      bigint   the first seq of contiguous keys (null: the default mode)
-- $5 gap_action     text     their gap policy: wait, proceed or block
-- $6 gap_timeout    interval after which proceed or block applies (null for wait)
SELECT ord, coalesce(id, 0), duplicate
FROM ordered_enqueue($1::jsonb, $2::integer, NULL, $3::integer, $4::bigint, $5::text, $6::interval);
