-- Gives back a claim whose job never started ($1 id, $2 claim version): its worker was stopped
-- before running it. The attempt is not counted. A job on its first claim ever is again one
-- that has not started (attempted_at); any other keeps its mark, since attempts cannot tell
-- (a replay resets them) and a started job must stay started for the late-event check.
UPDATE ordered_jobs
SET status = 'queued',
    attempts = attempts - 1,
    lease_until = NULL,
    attempted_at = CASE WHEN claim_version > 1 THEN attempted_at END
WHERE id = $1 AND claim_version = $2
  AND status = 'running' AND lease_until > clock_timestamp()
RETURNING id;
