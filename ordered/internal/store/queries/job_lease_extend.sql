-- Renews the lease of the current claim ($1 id, $2 claim version) by $3 from now, if it is
-- still live. No row: the claim was lost.
-- $1 id       bigint    the job
-- $2 version  bigint    its claim version
-- $3 lease    interval  the new lease, from now
UPDATE ordered_jobs
SET lease_until = clock_timestamp() + $3::interval
WHERE id = $1 AND claim_version = $2
  AND status = 'running' AND lease_until > clock_timestamp()
RETURNING lease_until;
