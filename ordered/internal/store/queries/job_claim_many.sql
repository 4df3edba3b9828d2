-- The claim: up to $1 jobs, leased for $2, in one auto-committed statement. Its body is
-- ordered_jobs_claim in schema/functions/ordered_jobs_claim.sql, a function so that its plan
-- can be fenced against the stale statistics of a queue table.
SELECT c.id, c.key, c.seq, c.kind, c.payload, c.attempts, c.max_attempts, c.claim_version,
       c.lease_until, c.created_at, c.available_at, c.attempted_at, c.last_error, c.recovered
FROM ordered_jobs_claim($1, $2) AS c;
