-- Failed jobs, optionally of one key ($1, null: all), oldest key and seq first, $2 at most.
SELECT id, key, seq, kind, payload, status, attempts, max_attempts, last_error,
       created_at, finished_at
FROM ordered_jobs
WHERE status IN ('failed', 'blocked')
  AND ($1::text IS NULL OR key = $1)
ORDER BY key, seq
LIMIT $2;
