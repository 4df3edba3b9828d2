-- Running jobs, the later jobs of running batches among them, the soonest lease to end first
-- (expired ones first), at most $1. The running jobs are read through ordered_jobs_leased in
-- lease order; the batches' later jobs (as ordered_batch_later has them) from the heads of the
-- batches, few and read through ordered_jobs_batches, at most $1 of each of the first $1.
-- $1 limit  integer  at most this many
WITH batches AS MATERIALIZED (
    SELECT key, seq, batch_to, lease_until, attempted_at, claimed_by
    FROM ordered_jobs
    WHERE status = 'running' AND batch_to > seq
)
SELECT j.id, j.key, j.seq, j.kind, j.attempts, j.max_attempts, j.claim_version, j.attempted_at,
       j.lease_until, extract(epoch FROM j.lease_until - statement_timestamp())::float8, j.claimed_by
FROM (
    (SELECT id, key, seq, kind, attempts, max_attempts, claim_version, attempted_at, lease_until, claimed_by
     FROM ordered_jobs
     WHERE status = 'running'
     ORDER BY lease_until, key, seq
     LIMIT $1)
    UNION ALL
    SELECT m.id, m.key, m.seq, m.kind, m.attempts + 1, m.max_attempts, m.claim_version + 1,
           h.attempted_at, h.lease_until, h.claimed_by
    FROM (SELECT * FROM batches ORDER BY lease_until, key LIMIT $1) AS h
    CROSS JOIN LATERAL (
        SELECT o.id, o.key, o.seq, o.kind, o.attempts, o.max_attempts, o.claim_version
        FROM ordered_jobs AS o
        WHERE o.key = h.key AND o.seq > h.seq AND o.seq <= h.batch_to
          AND o.status = 'queued' AND NOT o.head
        ORDER BY o.seq
        LIMIT $1) AS m
) AS j
ORDER BY j.lease_until, j.key, j.seq
LIMIT $1;
