-- Counts by status, blocked keys, the oldest ready job's age, the expired leases, and the keys
-- waiting on a gap (and blocked by one) with the oldest gap's age, now.
SELECT queued, running, done, failed, blocked, blocked_keys, expired_leases,
       coalesce(extract(epoch FROM statement_timestamp() - oldest_ready_at), 0)::float8,
       statement_timestamp(), gap_keys, gap_blocked_keys,
       coalesce(extract(epoch FROM statement_timestamp() - oldest_gap_at), 0)::float8
FROM ordered_stats_now;
