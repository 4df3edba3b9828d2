-- Running jobs, the soonest lease to end first (expired ones first), at most $1: the running
-- heads (read through ordered_heads_leased in lease order), the later jobs of running batches
-- (as ordered_batch_later has them, from the heads of the batches, few, at most $1 of each of
-- the first $1), and the jobs crashed batches left running (few, through ordered_jobs_crashed).
-- $1 limit  integer  at most this many
WITH batches AS MATERIALIZED (
    SELECT key, seq, batch_to, lease_until, attempted_at, claimed_by
    FROM ordered_heads
    WHERE batch_to IS NOT NULL AND state = 'running' AND batch_to > seq
)
SELECT j.id, j.key, j.seq, j.kind, j.attempts, j.max_attempts, j.claim_version, j.attempted_at,
       j.lease_until, extract(epoch FROM j.lease_until - statement_timestamp())::float8, j.claimed_by
FROM (
    (SELECT h.job_id AS id, h.key, h.seq, j.kind, h.attempts, h.max_attempts, h.claim_version,
            h.attempted_at, h.lease_until, h.claimed_by
     FROM ordered_heads AS h
     CROSS JOIN LATERAL (SELECT j.kind FROM ordered_jobs AS j WHERE j.id = h.job_id OFFSET 0) AS j
     WHERE h.state = 'running'
     ORDER BY h.lease_until, h.key
     LIMIT $1)
    UNION ALL
    SELECT m.id, m.key, m.seq, m.kind, m.attempts + 1, m.max_attempts, m.claim_version + 1,
           h.attempted_at, h.lease_until, h.claimed_by
    FROM (SELECT * FROM batches ORDER BY lease_until, key LIMIT $1) AS h
    CROSS JOIN LATERAL (
        SELECT o.id, o.key, o.seq, o.kind, o.attempts, o.max_attempts, o.claim_version
        FROM ordered_jobs AS o
        WHERE o.key = h.key AND o.seq > h.seq AND o.seq <= h.batch_to AND o.status = 'queued'
        ORDER BY o.seq
        LIMIT $1) AS m
    UNION ALL
    (SELECT c.id, c.key, c.seq, c.kind, c.attempts, c.max_attempts, c.claim_version, c.attempted_at,
            c.crash_lease_until, c.claimed_by
     FROM ordered_jobs AS c
     WHERE c.crash_lease_until IS NOT NULL
     ORDER BY c.crash_lease_until, c.key, c.seq
     LIMIT $1)
) AS j
ORDER BY j.lease_until, j.key, j.seq
LIMIT $1;
