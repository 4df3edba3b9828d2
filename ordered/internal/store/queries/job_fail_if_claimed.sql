-- Fails a job for good: $1 id, $2 claim version, $3 error, $4 block the key, $5 the claim's lease
-- must have expired with no attempts left (else it must be live). false: nothing changed.
SELECT ordered_job_fail($1, $2, $3, $4, $5);
