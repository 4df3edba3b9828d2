-- The jobs settled (done or failed for good) and those still pending (not held behind a blocked key).
SELECT
    count(*) FILTER (WHERE status IN ('done', 'failed', 'blocked')),
    count(*) FILTER (WHERE status IN ('queued', 'running') AND NOT EXISTS (
        SELECT 1 FROM ordered_jobs_now AS b WHERE b.key = j.key AND b.status = 'blocked'))
FROM ordered_jobs_now AS j
