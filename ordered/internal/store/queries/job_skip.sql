-- Releases the key blocked by failed job $1.
SELECT ordered_job_skip($1);
