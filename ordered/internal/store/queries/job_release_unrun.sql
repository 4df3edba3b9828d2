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
    UPDATE ordered_heads AS h
    SET state = 'queued',
        attempts = h.attempts - 1,
        lease_until = NULL,
        batch_to = NULL,
        attempted_at = CASE WHEN $3::text IS NOT NULL OR h.attempts > 1 OR j.last_error IS NOT NULL
                            THEN h.attempted_at END
    FROM ordered_jobs AS j
    CROSS JOIN LATERAL (SELECT o.batch_to FROM ordered_heads AS o WHERE o.key = j.key) AS old
    WHERE j.id = $1 AND h.key = j.key AND h.job_id = $1 AND h.claim_version = $2
      AND h.lease_until > clock_timestamp()
    RETURNING h.job_id, h.key, h.seq, old.batch_to
), noted AS (
    UPDATE ordered_jobs AS j SET last_error = $3::text
    FROM released AS r WHERE j.id = r.job_id AND $3::text IS NOT NULL
)
-- The wake-up refers to the released row, so it runs once per row released, never on its own;
-- so does the end of a batch the job led (ordered_batch_end).
SELECT r.job_id
FROM released AS r
CROSS JOIN LATERAL (SELECT ordered_batch_end(r.key, r.seq, r.batch_to, false, NULL, NULL, NULL)) AS ended
CROSS JOIN LATERAL (SELECT pg_notify('ordered_jobs', current_schema()) WHERE r.job_id IS NOT NULL) AS wake;
