-- The counts of queue_stats.sql as any worker took them at most $1 ago (ordered_stats_shared).
-- The oldest ready job's and the oldest gap's ages are as of now.
-- $1 max_age  interval  counts older than this are taken again
SELECT queued, running, done, failed, blocked, blocked_keys, expired_leases,
       coalesce(extract(epoch FROM statement_timestamp() - oldest_ready_at), 0)::float8,
       counted_at, gap_keys, gap_blocked_keys,
       coalesce(extract(epoch FROM statement_timestamp() - oldest_gap_at), 0)::float8
FROM ordered_stats_shared($1::interval);
