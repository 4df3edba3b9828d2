-- The workers that hold running jobs now, by the claimed_by their claims recorded, with how
-- many jobs each holds, how many of those leases expired, and when it claimed the newest. A
-- running head that leads a batch holds the batch's later jobs too (ordered_batch_later), under
-- its claim and lease; a crashed batch's jobs are counted for the worker that held them.
-- Running heads are few and read through ordered_heads_leased, the batches' later jobs through
-- ordered_heads_batches, the crashed ones through ordered_jobs_crashed.
-- $1 limit  integer  at most this many workers
WITH running AS (
    SELECT coalesce(claimed_by, '') AS name, count(*) AS jobs,
           count(*) FILTER (WHERE lease_until <= statement_timestamp()) AS expired,
           max(attempted_at) AS last_claimed_at
    FROM (SELECT h.claimed_by, h.lease_until, h.attempted_at FROM ordered_heads AS h WHERE h.state = 'running'
          UNION ALL
          SELECT c.claimed_by, c.crash_lease_until, c.attempted_at FROM ordered_jobs AS c
          WHERE c.crash_lease_until IS NOT NULL) AS r
    GROUP BY 1
), later AS (
    SELECT coalesce(claimed_by, '') AS name, count(*) AS jobs,
           count(*) FILTER (WHERE lease_until <= statement_timestamp()) AS expired
    FROM ordered_batch_later
    GROUP BY 1
)
SELECT r.name, r.jobs + coalesce(l.jobs, 0), r.expired + coalesce(l.expired, 0), r.last_claimed_at
FROM running AS r
LEFT JOIN later AS l ON l.name = r.name
ORDER BY r.name
LIMIT $1;
