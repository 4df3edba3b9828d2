-- Completes the current claim ($1 id, $2 claim version) inside the caller's transaction and
-- hands the key to its next job; a claim that is no longer current raises ORD06, which aborts
-- the transaction, so nothing written in it can commit.
-- $1 id       bigint  the job
-- $2 version  bigint  its claim version
SELECT ordered_job_complete($1, $2);
