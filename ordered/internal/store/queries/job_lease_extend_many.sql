-- Renews the one lease of a batch's claims ($1 ids, $2 their claim versions, same positions)
-- by $3 from now, for the claims still live. Rows: the jobs renewed; a claim not returned was
-- lost.
-- $1 ids       bigint[]  the jobs
-- $2 versions  bigint[]  their claim versions, same positions
-- $3 lease     interval  the new lease, from now
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE ordered_jobs AS j
SET lease_until = clock.t + $3::interval
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, version), clock
WHERE j.id = c.id AND j.claim_version = c.version
  AND j.status = 'running' AND j.lease_until > clock.t
RETURNING j.id;
