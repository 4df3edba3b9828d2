-- Gives back a claim whose job never started ($1 id, $2 claim version): its worker was stopped
-- before running it, or it waited too long for a handler slot. The attempt is not counted. A
-- job on its first claim ever is again one that has not started (attempted_at); any other
-- keeps its mark, since attempts cannot tell (a replay resets them) and a started job must
-- stay started for the late-event check. The job is claimable at once, so idle workers are
-- woken (NOTIFY at commit) rather than left to find it at their next poll.
WITH released AS (
    UPDATE ordered_jobs
    SET status = 'queued',
        attempts = attempts - 1,
        lease_until = NULL,
        attempted_at = CASE WHEN claim_version > 1 THEN attempted_at END
    WHERE id = $1 AND claim_version = $2
      AND status = 'running' AND lease_until > clock_timestamp()
    RETURNING id
)
-- The wake-up refers to the released row, so it runs once per row released, never on its own.
SELECT r.id
FROM released AS r
CROSS JOIN LATERAL (SELECT pg_notify('ordered_jobs', current_schema()) WHERE r.id IS NOT NULL) AS wake;
