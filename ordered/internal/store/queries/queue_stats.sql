-- Counts by status, blocked keys, the oldest ready job's age and the expired leases, now.
SELECT queued, running, done, failed, blocked, blocked_keys, expired_leases,
       coalesce(extract(epoch FROM statement_timestamp() - oldest_ready_at), 0)::float8,
       statement_timestamp()
FROM ordered_stats_now;
