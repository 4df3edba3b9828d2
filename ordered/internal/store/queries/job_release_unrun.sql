-- Gives back a claim without counting its attempt ($1 id, $2 claim version): its job never
-- started ($3 null: its worker was stopped before running it, or it waited too long for a
-- handler slot), or its handler was cut short by StopAndCancel ($3 what the handler returned),
-- which is no failure of the job. The job keeps its mark of a start (attempted_at), which
-- makes an event below it late, if it started: in this claim ($3), or before it, which an
-- attempt still counted or a recorded error shows (every retry and failure records one, and a
-- replay, which resets the attempts, keeps it). Otherwise the mark was this claim's and goes.
-- The job is claimable at once, so idle workers are woken (NOTIFY at commit) rather than left
-- to find it at their next poll.
-- $1 id       bigint  the job
-- $2 version  bigint  its claim version
-- $3 error    text    what a handler cut short returned (null: the job never started)
WITH released AS (
    UPDATE ordered_jobs
    SET status = 'queued',
        attempts = attempts - 1,
        lease_until = NULL,
        last_error = coalesce($3::text, last_error),
        attempted_at = CASE WHEN $3::text IS NOT NULL OR attempts > 1 OR last_error IS NOT NULL
                            THEN attempted_at END
    WHERE id = $1 AND claim_version = $2
      AND status = 'running' AND lease_until > clock_timestamp()
    RETURNING id, key, seq, batch_to
)
-- The wake-up refers to the released row, so it runs once per row released, never on its own;
-- so does the end of a batch the job led (ordered_batch_end).
SELECT r.id
FROM released AS r
CROSS JOIN LATERAL (SELECT ordered_batch_end(r.key, r.seq, r.batch_to, false, NULL, NULL, NULL)) AS ended
CROSS JOIN LATERAL (SELECT pg_notify('ordered_jobs', current_schema()) WHERE r.id IS NOT NULL) AS wake;
