-- Running jobs whose lease expired with no attempts left: their workers crashed on every
-- attempt. Maintenance fails them through the policy, $1 at a time. Only a key's lowest open
-- job qualifies (as for recovery): the rest of a crashed batch waits behind it, and is
-- recovered or failed in order once the key reaches it.
-- $1 limit  integer  at most this many
SELECT j.id, j.key, j.seq, j.kind, j.attempts, j.max_attempts, j.claim_version, j.last_error
FROM ordered_jobs AS j
WHERE j.status = 'running'
  AND j.lease_until <= statement_timestamp()
  AND j.attempts >= j.max_attempts
  AND NOT EXISTS (
      SELECT 1
      FROM (SELECT e.seq FROM ordered_jobs AS e
            WHERE e.key = j.key AND e.status IN ('queued', 'running', 'blocked')
            ORDER BY e.seq LIMIT 1) AS lowest
      WHERE lowest.seq < j.seq)
ORDER BY j.lease_until
LIMIT $1;
