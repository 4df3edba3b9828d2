-- Releases the key blocked by failed job $1: true if it did, false if the job blocked nothing.
SELECT ordered_job_skip($1);
