-- A key's jobs as they run (ordered_jobs_now) in seq order after seq $2, at most $3, read
-- through the key's (key, seq) entries, so no other key's jobs are read.
-- $1 key        text     the key
-- $2 after_seq  bigint   only jobs with a higher seq (-1: from the start)
-- $3 limit      integer  at most this many
SELECT id, key, seq, kind, payload, status, head, attempts, max_attempts, claim_version,
       last_error, lease_until,
       extract(epoch FROM lease_until - statement_timestamp())::float8,
       available_at, run_at, created_at, attempted_at, finished_at, claimed_by
FROM ordered_jobs_now
WHERE key = $1 AND seq > $2
ORDER BY seq
LIMIT $3;
