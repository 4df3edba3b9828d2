-- Completes a batch of claims ($1 ids, $2 their claim versions, same positions), hands each key
-- to its next job and claims up to $3 of those next jobs, leased for $4. Rows: the completed
-- ids (completed true), then the claimed jobs; the claims not returned were lost.
SELECT c.completed, c.id, c.key, c.seq, c.kind, c.payload, c.attempts, c.max_attempts,
       c.claim_version, c.lease_until, c.created_at, c.available_at, c.attempted_at,
       c.last_error
FROM ordered_jobs_complete($1::bigint[], $2::bigint[], $3::integer, $4::interval) AS c;
