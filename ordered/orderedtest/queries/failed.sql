-- Every job failed for good, by key and seq.
SELECT id, key, seq, kind, payload, status = 'blocked' AS blocking, attempts, max_attempts,
       coalesce(last_error, '') AS last_error, created_at, finished_at
FROM ordered_jobs
WHERE failed_at IS NOT NULL AND status IN ('failed', 'blocked')
ORDER BY key, seq;
