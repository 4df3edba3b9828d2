-- Gives back a claim whose job never started ($1 id, $2 claim version): its worker was stopped
-- before running it. The attempt is not counted, and a job that never ran before is again
-- one that has not started (attempted_at). No row: the claim was lost.
UPDATE ordered_jobs
SET status = 'queued',
    attempts = attempts - 1,
    lease_until = NULL,
    attempted_at = CASE WHEN attempts > 1 THEN attempted_at END
WHERE id = $1 AND claim_version = $2
  AND status = 'running' AND lease_until > clock_timestamp()
RETURNING id;
