-- Ends the lease of a claim ($1 id, $2 claim version) now: its renewals fail, another worker
-- may claim the job.
UPDATE ordered_heads SET lease_until = clock_timestamp()
WHERE job_id = $1 AND claim_version = $2 AND state = 'running'
