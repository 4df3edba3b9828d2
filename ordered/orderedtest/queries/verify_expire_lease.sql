-- Ends the lease of a claim ($1 id, $2 claim version) now: its renewals fail, another worker
-- may claim the job.
UPDATE ordered_jobs SET lease_until = clock_timestamp()
WHERE id = $1 AND claim_version = $2 AND status = 'running'
