-- Running jobs whose lease expired with no attempts left: their workers crashed on every
-- attempt. Maintenance fails them through the policy, $1 at a time.
-- $1 limit  integer  at most this many
SELECT id, key, seq, kind, attempts, max_attempts, claim_version, last_error
FROM ordered_jobs
WHERE status = 'running'
  AND lease_until <= statement_timestamp()
  AND attempts >= max_attempts
ORDER BY lease_until
LIMIT $1;
