-- Completes the current claim ($1 id, $2 claim version) and hands the key to its next job.
-- false: the claim was lost and nothing changed.
SELECT ordered_job_complete($1, $2);
