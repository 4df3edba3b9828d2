-- The claim: up to $1 jobs, leased for $2, in one auto-committed statement. Its body is
-- ordered_jobs_claim in schema/functions/ordered_jobs_claim.sql, a function so that its plan
-- can be fenced against the stale statistics of a queue table.
-- $1 limit  integer   at most this many jobs
-- $2 lease  interval  each claim's lease, from now
-- The columns are the function's RETURNS TABLE, in its order.
SELECT c.* FROM ordered_jobs_claim($1, $2) AS c;
