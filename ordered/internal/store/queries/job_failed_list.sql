-- Failed jobs, oldest key and seq first.
-- $1 key    text     only this key's (null: all)
-- $2 limit  integer  at most this many
SELECT id, key, seq, kind, payload, status, attempts, max_attempts, last_error,
       created_at, finished_at
FROM ordered_jobs
WHERE failed_at IS NOT NULL AND status IN ('failed', 'blocked')
  AND ($1::text IS NULL OR key = $1)
ORDER BY key, seq
LIMIT $2;
