-- Gives the current claim ($1 id, $2 claim version) back for a retry after $3, recording $4 as
-- the error. The job stays the head of its key, so later jobs keep waiting for it.
-- No row: the claim was lost.
-- $1 id       bigint    the job
-- $2 version  bigint    its claim version
-- $3 delay    interval  when it may run again, from now
-- $4 error    text      the error to record
-- A batch it led ends with it (ordered_batch_end).
WITH released AS (
    UPDATE ordered_jobs
    SET status = 'queued',
        available_at = clock_timestamp() + $3::interval,
        lease_until = NULL,
        last_error = $4
    WHERE id = $1 AND claim_version = $2
      AND status = 'running' AND lease_until > clock_timestamp()
    RETURNING id, key, seq, batch_to
)
SELECT r.id
FROM released AS r
CROSS JOIN LATERAL (SELECT ordered_batch_end(r.key, r.seq, r.batch_to, false, NULL, NULL, NULL)) AS ended;
