-- Counts by status, blocked keys, the oldest ready job's age and the expired leases.
SELECT
    count(*) FILTER (WHERE status = 'queued')                          AS queued,
    count(*) FILTER (WHERE status = 'running')                         AS running,
    count(*) FILTER (WHERE status = 'done')                            AS done,
    count(*) FILTER (WHERE status IN ('failed', 'blocked'))            AS failed,
    count(*) FILTER (WHERE status = 'blocked')                         AS blocked_keys,
    count(*) FILTER (WHERE status = 'running'
                       AND lease_until <= statement_timestamp())       AS expired_leases,
    coalesce(extract(epoch FROM statement_timestamp() - min(available_at)
             FILTER (WHERE head AND status = 'queued'
                       AND available_at <= statement_timestamp())), 0)::float8 AS oldest_ready_seconds
FROM ordered_jobs;
