-- Releases the key blocked by failed job $1: true if it did, false if the job blocked nothing.
-- $1 id  bigint  the failed job
SELECT ordered_job_skip($1);
