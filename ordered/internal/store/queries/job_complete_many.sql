-- Completes a batch of claims ($1 ids, $2 their claim versions, same positions), hands each key
-- to its next job and claims up to $3 of those next jobs, leased for $4. Rows: the completed
-- ids (completed true), then the claimed jobs; the claims not returned were lost.
-- $1 ids         bigint[]  the claims' jobs
-- $2 versions    bigint[]  their claim versions, same positions
-- $3 next_limit  integer   at most this many next jobs claimed
-- $4 lease       interval  the next jobs' leases, from now
-- The columns are the function's RETURNS TABLE, in its order, then recovered (always false:
-- the next jobs it claims were queued), as job_complete_batch.sql returns them.
SELECT c.*, false AS recovered FROM ordered_jobs_complete($1::bigint[], $2::bigint[], $3::integer, $4::interval) AS c;
