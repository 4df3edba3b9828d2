-- Running jobs, the soonest lease to end first (expired ones first), at most $1.
-- $1 limit  integer  at most this many
SELECT id, key, seq, kind, attempts, max_attempts, claim_version, attempted_at, lease_until,
       extract(epoch FROM lease_until - statement_timestamp())::float8, claimed_by
FROM ordered_jobs
WHERE status = 'running'
ORDER BY lease_until
LIMIT $1;
