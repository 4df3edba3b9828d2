-- Gives the current claim ($1 id, $2 claim version) back for a retry after $3, recording $4 as
-- the error. The job stays the head of its key, so later jobs keep waiting for it.
-- No row: the claim was lost. A batch it led ends with it (ordered_batch_end).
-- $1 id       bigint    the job
-- $2 version  bigint    its claim version
-- $3 delay    interval  when it may run again, from now
-- $4 error    text      the error to record
WITH released AS (
    UPDATE ordered_heads AS h
    SET state = 'queued',
        available_at = clock_timestamp() + $3::interval,
        lease_until = NULL,
        batch_to = NULL
    FROM ordered_jobs AS j
    CROSS JOIN LATERAL (SELECT o.batch_to FROM ordered_heads AS o WHERE o.key = j.key) AS old
    WHERE j.id = $1 AND h.key = j.key AND h.job_id = $1 AND h.claim_version = $2
      AND h.lease_until > clock_timestamp()
    RETURNING h.job_id, h.key, h.seq, old.batch_to
), noted AS (
    UPDATE ordered_jobs AS j SET last_error = $4
    FROM released AS r WHERE j.id = r.job_id
)
SELECT r.job_id
FROM released AS r
CROSS JOIN LATERAL (SELECT ordered_batch_end(r.key, r.seq, r.batch_to, false, NULL, NULL, NULL)) AS ended;
