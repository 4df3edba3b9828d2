-- The workers that hold running jobs now, by the claimed_by their claims recorded, with how
-- many jobs each holds, how many of those leases expired, and when it claimed the newest.
-- Running jobs are few and read through ordered_jobs_leased.
-- $1 limit  integer  at most this many workers
SELECT coalesce(claimed_by, ''), count(*),
       count(*) FILTER (WHERE lease_until <= statement_timestamp()),
       max(attempted_at)
FROM ordered_jobs
WHERE status = 'running'
GROUP BY 1
ORDER BY 1
LIMIT $1;
