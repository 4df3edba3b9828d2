-- A running batch's later jobs stay queued in their rows (004_batch_members.sql) while they run
-- under the claim of the batch's head, the key's running job: it covers the queued jobs of its
-- key above it up to its batch_to, as the settlements accept their claims
-- (job_lease_extend_many.sql). What reads jobs to show them reads them as they run.

-- The running jobs that lead batches: few (none without batch workers) and written by a
-- batch's claim alone, so that the readers below visit neither every running job nor a key's
-- backlog.
CREATE INDEX ordered_jobs_batches ON ordered_jobs (key, seq)
    WHERE status = 'running' AND batch_to > seq;

-- The later jobs of the running batches, each with its batch's head and that head's claim.
CREATE VIEW ordered_batch_later AS
SELECT m.id, m.key, m.seq, h.id AS head_id, h.lease_until, h.attempted_at, h.claimed_by
FROM ordered_jobs AS h
JOIN ordered_jobs AS m ON m.key = h.key AND m.seq > h.seq AND m.seq <= h.batch_to
WHERE h.status = 'running' AND h.batch_to > h.seq
  AND m.status = 'queued' AND NOT m.head;

-- Every job as it runs: a later job of a running batch as its claim returned it (running,
-- under the batch's lease, its attempt counted and its claim version raised); row_status is
-- the status its row has. The batch is found as ordered_batch_later finds it, from the job's
-- side: one probe of ordered_jobs_batches, which holds only the heads of running batches.
CREATE VIEW ordered_jobs_now AS
SELECT j.id, j.key, j.seq, j.kind, j.payload,
       CASE WHEN b.covered THEN 'running' ELSE j.status END AS status,
       j.status AS row_status,
       j.head,
       j.attempts + CASE WHEN b.covered THEN 1 ELSE 0 END AS attempts,
       j.max_attempts,
       j.claim_version + CASE WHEN b.covered THEN 1 ELSE 0 END AS claim_version,
       j.last_error,
       CASE WHEN b.covered THEN b.lease_until ELSE j.lease_until END AS lease_until,
       j.available_at, j.run_at, j.created_at,
       CASE WHEN b.covered THEN b.attempted_at ELSE j.attempted_at END AS attempted_at,
       j.finished_at,
       CASE WHEN b.covered THEN b.claimed_by ELSE j.claimed_by END AS claimed_by
FROM ordered_jobs AS j
LEFT JOIN LATERAL (
    SELECT true AS covered, h.lease_until, h.attempted_at, h.claimed_by
    FROM ordered_jobs AS h
    WHERE j.status = 'queued' AND NOT j.head
      AND h.key = j.key AND h.seq < j.seq AND h.batch_to >= j.seq
      AND h.status = 'running' AND h.batch_to > h.seq
) AS b ON true;

-- The counts take a running batch's later jobs as running, and as expired with its lease.
CREATE OR REPLACE VIEW ordered_stats_now AS
WITH later AS (
    SELECT count(*) AS running, count(*) FILTER (WHERE b.lease_until <= statement_timestamp()) AS expired
    FROM ordered_batch_later AS b
)
SELECT
    count(*) FILTER (WHERE status = 'queued') - (SELECT l.running FROM later AS l) AS queued,
    count(*) FILTER (WHERE status = 'running') + (SELECT l.running FROM later AS l) AS running,
    count(*) FILTER (WHERE status = 'done')                      AS done,
    count(*) FILTER (WHERE status = 'failed')                    AS failed,
    count(*) FILTER (WHERE status = 'blocked')                   AS blocked,
    count(DISTINCT key) FILTER (WHERE status = 'blocked')        AS blocked_keys,
    count(*) FILTER (WHERE status = 'running'
                       AND lease_until <= statement_timestamp())
        + (SELECT l.expired FROM later AS l)                     AS expired_leases,
    min(available_at) FILTER (WHERE head AND status = 'queued'
                                AND available_at <= statement_timestamp()) AS oldest_ready_at,
    (SELECT count(*) FROM ordered_gaps)                          AS gap_keys,
    (SELECT count(*) FROM ordered_gaps WHERE blocked_at IS NOT NULL) AS gap_blocked_keys,
    (SELECT min(since) FROM ordered_gaps)                        AS oldest_gap_at
FROM ordered_jobs;
