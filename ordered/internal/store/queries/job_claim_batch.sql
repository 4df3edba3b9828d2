-- The batch claim: up to $1 heads, each with up to $2 - 1 of its key's next jobs, leased for
-- $3, in one auto-committed statement. Its body is ordered_jobs_claim_batch in
-- schema/functions/ordered_jobs_claim_batch.sql.
-- $1 limit  integer   at most this many heads (batches)
-- $2 batch  integer   at most this many jobs a batch
-- $3 lease  interval  each claim's lease, from now
-- The columns are the function's RETURNS TABLE, in its order.
SELECT c.* FROM ordered_jobs_claim_batch($1::integer, $2::integer, $3::interval) AS c;
