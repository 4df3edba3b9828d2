-- Keys held by a blocked job, with that job.
-- $1 limit  integer  at most this many
SELECT key, id, seq, finished_at, last_error
FROM ordered_jobs
WHERE failed_at IS NOT NULL AND status = 'blocked'
ORDER BY key
LIMIT $1;
