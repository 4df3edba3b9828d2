-- Raises ORD06 for the claim ($1 id, $2 claim version) that a fenced write in the caller's
-- transaction found lost, aborting that transaction.
-- $1 id       bigint  the job
-- $2 version  bigint  its claim version
SELECT ordered_claim_lost($1, $2);
