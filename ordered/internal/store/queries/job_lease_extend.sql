-- Renews the lease of the current claim ($1 id, $2 claim version) by $3 from now, if it is
-- still live. No row: the claim was lost.
-- $1 id       bigint    the job
-- $2 version  bigint    its claim version
-- $3 lease    interval  the new lease, from now
UPDATE ordered_heads AS h
SET lease_until = ordered_lease_end(clock_timestamp(), $3::interval)
FROM ordered_jobs AS j
WHERE j.id = $1 AND h.key = j.key AND h.job_id = $1 AND h.claim_version = $2
  AND h.lease_until > clock_timestamp()
RETURNING h.lease_until;
