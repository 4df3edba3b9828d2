-- Running heads whose lease expired with no attempts left: their workers crashed on every
-- attempt. Maintenance fails them through the policy, $1 at a time. Only a key's lowest open
-- job qualifies (as for recovery): the rest of a crashed batch waits behind it, and is
-- recovered or failed in order once the key reaches it. The guard's LIMIT keeps it a probe of
-- the key's jobs per head, whatever the planner thinks of the table's size.
-- $1 limit  integer  at most this many
SELECT h.job_id, h.key, h.seq, j.kind, h.attempts, h.max_attempts, h.claim_version, j.last_error
FROM ordered_heads AS h
CROSS JOIN LATERAL (SELECT j.kind, j.last_error FROM ordered_jobs AS j WHERE j.id = h.job_id OFFSET 0) AS j
WHERE h.state = 'running'
  AND h.lease_until <= statement_timestamp()
  AND h.attempts >= h.max_attempts
  AND NOT EXISTS (SELECT 1 FROM (
                      SELECT 1 FROM ordered_jobs AS e
                      WHERE e.key = h.key AND e.seq > h.closed_to AND e.seq < h.seq
                        AND e.status IN ('queued', 'blocked')
                      LIMIT 1) AS lower)
ORDER BY h.lease_until
LIMIT $1;
